"""Extension by dotted path (docs/extending.md): the runnable example trains through the CLI,
and a path that does not load or has the wrong shape is a config error naming the key."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, build_config, load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/extensions/reverse.py"
runner = CliRunner()


@pytest.fixture(autouse=True)
def at_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example config's file paths are relative to it


def test_the_example_task_reward_judge_and_rollout_function_train_through_the_cli(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "examples/extensions/reverse.yaml", f"out_dir={out}",
                                 "rl.steps=2", "eval.num_problems=4"])
    assert result.exit_code == 0, result.output
    episodes = [json.loads(line) for line in open(out / "episodes.jsonl")]
    assert len(episodes) == 2 * 4 * 4  # steps x prompts x group
    assert {e["meta"]["played_by"] for e in episodes} == {"logged_rollout"}
    for e in episodes:  # the reward function and the judge scored every episode
        completion, reference = e["meta"]["completion"], e["meta"]["reference"]
        assert e["rewards"]["correct"] == float(completion.strip().lower() == reference)
        assert e["rewards"]["brevity"] == 1.0 / (1 + max(0, len(completion) - 3))
    assert {len(e["meta"]["reference"]) for e in episodes} == {3}  # the example's words
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval_after_rl"]) >= {"correct", "brevity", "accuracy"}


def test_a_tool_named_by_path_joins_the_agent_loop(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "stages=[rl]",
        "model.preset=nano", f"agent.tools=[{EXAMPLE}:count_letter]", "rl.steps=1",
        "rl.prompts_per_step=2", "rl.group_size=2", "eval.num_problems=2",
        "rl.save_episodes=true"])
    assert result.exit_code == 0, result.output
    episode = json.loads(open(out / "episodes.jsonl").readline())
    (schema,) = episode["meta"]["tools"]
    assert schema["function"]["name"] == "count_letter"
    assert schema["function"]["parameters"]["required"] == ["word", "letter"]


@pytest.mark.parametrize(("override", "key", "says"), [
    ("task.name=no_such_package.tasks:make", "task.name", "cannot import 'no_such_package.tasks'"),
    (f"task.name={EXAMPLE}:missing", "task.name", "has no attribute 'missing'"),
    ("task.name=examples/none.py:make", "task.name", "no file 'examples/none.py'"),
    (f"task.rollout={EXAMPLE}:LETTERS", "task.rollout", "is a str, not a rollout function"),
    (f"reward.parts.correct.verifier={EXAMPLE}:ReverseTask", "reward.parts.correct.verifier",
     "is not a reward function (returns a float, a dict of floats or None"),
    (f"agent.tools=[{EXAMPLE}:make_tasks]", "agent.tools.0", "not a tool"),
    ("task.name=arithmetic_typo", "task.name", "unknown task 'arithmetic_typo'"),
])
def test_a_path_that_does_not_fit_is_a_config_error_naming_the_key(override, key, says):
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", [override])
    text = " ".join(str(err.value).split())
    assert f"{key}:" in text and says in text, text


def test_a_judge_function_must_be_named_and_served_by_nothing_else():
    base = {"stages": ["rl"], "reward": {"parts": {"correct": {"verifier": "numeric"},
                                                   "style": {"verifier": "judge"}}}}
    with pytest.raises(ConfigError, match="style.function: Field required"):
        build_config(base, ["reward.judges.style.kind=function"])
    with pytest.raises(ConfigError, match="style.model: applies to kind in .*, not function"):
        build_config(base, ["reward.judges.style.kind=function",
                            f"reward.judges.style.function={EXAMPLE}:brevity",
                            "reward.judges.style.model=somewhere"])
    with pytest.raises(ConfigError, match="not a judge"):
        build_config(base, ["reward.judges.style.kind=function",
                            f"reward.judges.style.function={EXAMPLE}:ReverseTask"])


def test_a_task_of_your_own_needs_its_own_sft_data():
    with pytest.raises(ConfigError, match="sft stage on task .* needs sft.data"):
        load_config("configs/quickstart.yaml", [f"task.name={EXAMPLE}:make_tasks",
                                                "reward.parts.correct.verifier=exact"])
