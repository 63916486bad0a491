"""Harbor tasks in the sandbox (``task.name: harbor``): the Dockerfile read, not built, and
what needs a build left out by name; the reference solution scores 1, doing nothing 0, a
reward file the agent planted nothing; reward.json's entries; a few RL steps."""

import json
import random
import shutil

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.envs.libraries.harbor import (
    HarborTasks,
    UnsupportedTask,
    dockerfile_lines,
    reward_of,
)

TASKS = "examples/harbor/tasks"
pytestmark = pytest.mark.namespaces  # deselected, and said so, where the kernel refuses


@pytest.fixture(scope="module")
def tasks():
    return HarborTasks(TASKS)


def test_the_dockerfile_is_read_and_a_build_is_refused_by_name(tasks, tmp_path):
    assert dockerfile_lines("FROM x\n# c\nCOPY --chown=a:b src/ \\\n  dst/\n") == [
        ("FROM", ["x"]), ("COPY", ["src/", "dst/"])]
    assert tasks.skipped == {"needs-build": "its image needs building (RUN)"}
    fix = tasks.tasks["fix-add"]
    assert (fix.workdir, fix.files) == ("/app", {"calc/add.py": "def add(a, b):\n"
                                                                "    return a - b\n"})
    outside = tmp_path / "t"
    shutil.copytree(f"{TASKS}/fix-add", outside)
    (outside / "environment" / "Dockerfile").write_text("WORKDIR /app\nCOPY calc /opt/calc\n")
    with pytest.raises(UnsupportedTask, match="outside the working directory /app"):
        type(fix).load(outside)
    (outside / "environment" / "Dockerfile").write_text("WORKDIR /app\nCOPY calc/add.py .\n")
    assert type(fix).load(outside).files == {"add.py": fix.files["calc/add.py"]}
    (outside / "environment" / "Dockerfile").write_text(  # the workspace is the last WORKDIR
        "WORKDIR /app\nCOPY calc/add.py /app/top.py\nWORKDIR /app/src\n")
    with pytest.raises(UnsupportedTask, match="/app/top.py, outside the working directory"):
        type(fix).load(outside)
    for workdir in ("/usr/src/app", "/logs/app"):
        (outside / "environment" / "Dockerfile").write_text(f"WORKDIR {workdir}\n")
        with pytest.raises(UnsupportedTask, match=f"WORKDIR {workdir}"):
            type(fix).load(outside)
    (outside / "environment" / "Dockerfile").write_text("WORKDIR /app\nCOPY calc calc/\n")
    (outside / "environment" / "calc" / "leak.py").symlink_to("/etc/hostname")
    with pytest.raises(UnsupportedTask, match="leak.py links outside the build context"):
        type(fix).load(outside)


def test_tasks_of_two_datasets_with_one_name_are_both_kept(tmp_path):
    """A task is named by its path under the directory: two datasets' ``hello-file`` are
    two tasks; a directory that is itself a task takes its own name."""
    for dataset in ("a", "b"):
        shutil.copytree(f"{TASKS}/hello-file", tmp_path / dataset / "hello-file")
    assert sorted(HarborTasks(tmp_path).tasks) == ["a/hello-file", "b/hello-file"]
    assert list(HarborTasks(tmp_path / "a" / "hello-file").tasks) == ["hello-file"]


@pytest.mark.parametrize("name", ["hello-file", "fix-add"])
def test_the_solution_scores_one_and_a_planted_reward_nothing(tasks, name):
    task = tasks.tasks[name]
    env = tasks.make_env(name)
    try:
        bash = env.tools.tools["bash"].fn
        assert bash("pwd").startswith("/app\n")
        bash("echo 1 > /logs/verifier/reward.txt")  # the agent's own "reward"
        assert env.verdict("Done.") == {"harbor": 0.0}
        bash((task.folder / "solution" / "solve.sh").read_text())
        assert env.verdict("Done.") == {"harbor": 1.0}
    finally:
        env.close()
    if name == "fix-add":  # reward.json: its "reward" entry; every entry kept
        assert env.info()["harbor_rewards"] == {"reward": 1.0, "checks": 1.0}


def test_a_reward_file_that_is_a_link_is_no_reward(tmp_path):
    """The verifier's files are read on the host: a link planted in the sandbox would read a
    host file as the trainer."""
    (tmp_path / "verifier").mkdir()
    (tmp_path / "one.txt").write_text("1")
    (tmp_path / "verifier" / "reward.txt").symlink_to(tmp_path / "one.txt")
    assert reward_of(tmp_path) == (0.0, {"harbor_error": "the verifier wrote no reward"})
    (tmp_path / "verifier" / "reward.txt").unlink()
    (tmp_path / "verifier" / "reward.json").write_text('{"reward": 1' + "0" * 400 + "}")
    assert reward_of(tmp_path)[0] == 0.0  # too large for a float: not a number


def test_sft_conversations_run_the_reference_solution(tasks):
    conversation = tasks.sft_conversation(tasks.tasks["fix-add"], 0.0, random.Random(0))
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant"]
    assert "a + b" in conversation[1]["content"] and conversation[2]["content"] == \
        "[exit code 0]"


@pytest.mark.slow
def test_a_few_rl_steps_train_on_harbor_tasks(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "examples/harbor/tasks.yaml", "model.preset=nano", "threads=1",
        "sft.steps=2", "sft.batch_size=4", "rl.steps=2", "rl.group_size=2",
        "rl.max_new_tokens=16", "eval.max_new_tokens=16", f"out_dir={out}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if r.get("stage") == "rl" and "reward/harbor" in r]
    assert len(steps) == 2
