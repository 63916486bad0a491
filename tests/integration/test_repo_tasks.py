"""Code tasks from a repository's history (docs/synthesis.md): every kept task's patch,
applied to its packaged workspace, passes its fail-to-pass and pass-to-pass tests, and the
workspace alone fails every fail-to-pass test; root, docs-only, test-less and flaky commits are
dropped with their reasons, and so is a commit whose base already holds a line of its
solution; the workspace carries no history, cache or bytecode."""

import json
import subprocess

import pytest

from posttrain.synthesis.demo_repo import commit, make_demo_repo
from posttrain.synthesis.repo_tasks import (
    apply_patch,
    git,
    run_tests,
    synthesize_repo_tasks,
    task_from_commit,
)


def files_under(d):
    return {str(p.relative_to(d)): p.read_text() for p in d.rglob("*") if p.is_file()}


def test_kept_tasks_pass_with_their_patch_and_fail_without(tmp_path):
    repo = make_demo_repo(tmp_path / "repo", functions=5, flaky=False)
    report = synthesize_repo_tasks(repo, tmp_path / "tasks", runs=2)
    assert report["kept"] == 5 and report["dropped"] == {
        "a root or merge commit (not one parent)": 1, "the commit changes no code": 1,
        "no fail-to-pass test": 1}
    for row in report["tasks"]:
        if row["kept"] is None:
            continue
        d = tmp_path / "tasks" / row["kept"]
        task = json.loads((d / "task.json").read_text())
        workspace, hidden = files_under(d / "workspace"), files_under(d / "hidden")
        assert not any(p.startswith(".git") or p.endswith(".pyc") for p in workspace)
        assert task["statement"].startswith("Add f") and len(task["f2p"]) == 1
        solved = run_tests({**apply_patch(workspace, (d / "patch.diff").read_text()), **hidden})
        assert all(solved[t] == "pass" for t in task["f2p"] + task["p2p"])
        empty = run_tests({**workspace, **hidden})
        assert all(empty.get(t) != "pass" for t in task["f2p"])  # a failed import: absent
        assert all(empty[t] == "pass" for t in task["p2p"])


def test_a_flaky_test_is_left_out_and_a_commit_resting_on_it_dropped(tmp_path):
    """The coin test passes half the time: 20 runs all alike with probability 2 ** -19."""
    repo = make_demo_repo(tmp_path / "repo", functions=7)
    log = git(repo, "log", "--format=%H %s").splitlines()
    coin = next(line.split()[0] for line in log if "coin" in line)
    after = next(line.split()[0] for line in log if " Add f6" in line)
    task, why = task_from_commit(repo, coin, runs=20)
    assert task is None and why.startswith("unstable: its fail-to-pass tests")
    task, why = task_from_commit(repo, after, runs=20)
    assert why == "" and task["flaky"] == ["tests.test_coin::test_coin"]
    assert "tests.test_coin::test_coin" not in task["p2p"] + task["f2p"]


def test_a_base_holding_a_line_of_the_solution_is_leaky(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    line = "return max(2, min(14, x))"
    commit(repo, {"pkg/__init__.py": "", "pkg/core.py": "def f(x):\n    return x\n",
                  "tests/__init__.py": "", "NOTES.md": f"{line}\n"},
           "Start")
    commit(repo, {"pkg/core.py": f"def f(x):\n    {line}\n", "tests/test_f.py":
                  "from pkg.core import f\n\n\ndef test_f():\n    assert f(20) == 14\n"},
           "Clip f")
    task, why = task_from_commit(repo, git(repo, "rev-parse", "HEAD").strip(), runs=1)
    assert task is None and why == f"leaky: the workspace holds the solution's lines {line!r}"


@pytest.mark.parametrize("args", [["--demo"], []])
def test_the_command_builds_from_a_demo_or_refuses_what_is_no_repository(tmp_path, args):
    from typer.testing import CliRunner

    from posttrain.cli.app import app

    if not args:
        (tmp_path / "repo").mkdir()
    result = CliRunner().invoke(app, ["synthesize", "repo", str(tmp_path / "repo"),
                                      str(tmp_path / "tasks"), "--runs", "1", *args])
    if args:
        assert result.exit_code == 0, result.output
        kept = json.loads((tmp_path / "tasks" / "report.json").read_text())["kept"]
        # in one run the demo's coin test (heads half the time) looks like any other: the
        # commits it touches are kept or dropped by its flips (6 to 8 of them kept, seen)
        assert kept >= 1 and len(list((tmp_path / "tasks").glob("*/patch.diff"))) == kept
    else:
        assert result.exit_code != 0 and "is not a git repository" in result.output


@pytest.fixture(scope="module")
def repo_tasks(tmp_path_factory):
    from posttrain.envs.repo_env import RepoTasks

    d = tmp_path_factory.mktemp("repo_env")
    synthesize_repo_tasks(make_demo_repo(d / "repo", functions=3, flaky=False), d / "tasks",
                          runs=1)
    return RepoTasks(d / "tasks", eval_fraction=0.3)


def test_an_episode_is_scored_by_the_hidden_tests_whatever_it_does_to_the_visible_ones(
        repo_tasks):
    import asyncio

    task = next(iter(repo_tasks.tasks.values()))
    path = task.meta["files"][0]
    solved = apply_patch(task.workspace, task.patch)[path]

    def play(*calls):
        env = repo_tasks.make_env(task.reference)
        try:
            for name, args in calls:
                asyncio.run(env.tools.tools[name](args))
            return env.verdict("Done.")
        finally:
            env.close()

    assert play() == {"correct": 0.0, "f2p": 0.0, "p2p": 1.0}  # the base as it is
    assert play(("write_file", {"path": path, "content": solved})) == {
        "correct": 1.0, "f2p": 1.0, "p2p": 1.0}
    forged = {"path": task.meta["f2p"][0].split("::")[0].replace(".", "/") + ".py",
              "content": "def test_anything():\n    pass\n"}  # the hidden test's file, faked
    assert play(("write_file", forged))["f2p"] == 0.0
    env = repo_tasks.make_env(task.reference)
    read = asyncio.run(env.tools.tools["read_file"]({"path": "pkg/core.py"}))
    assert read == task.workspace["pkg/core.py"]
    assert asyncio.run(env.tools.tools["read_file"]({"path": path})).startswith("error:")
    assert "pass" in asyncio.run(env.tools.tools["run_tests"]({}))
    env.close()


def test_sft_traces_write_the_patched_files(repo_tasks):
    import random

    task = next(iter(repo_tasks.tasks.values()))
    conv = repo_tasks.sft_conversation(task, 0.0, random.Random(0))
    written = [m for m in conv if m["role"] == "assistant" and "write_file" in m["content"]]
    path = task.meta["files"][0]
    assert json.dumps(apply_patch(task.workspace, task.patch)[path])[1:-1] in \
        written[0]["content"] and conv[-1] == {"role": "assistant", "content": "Done."}
    assert all(m["content"] for m in conv if m["role"] == "assistant")  # no empty turn
