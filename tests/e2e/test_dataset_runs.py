"""A user's dataset through the CLI: RL on its prompts and `posttrain eval` on its held-out
rows, with every column kept in the episode record."""

import json

import datasets
from typer.testing import CliRunner

from posttrain.cli.app import app

runner = CliRunner()


def test_rl_and_eval_on_a_parquet_dataset(tmp_path):
    rows = [{"q": f"What is {i}+{i}?", "solution": 2 * i, "source": "doubles" if i % 2 else "x"}
            for i in range(40)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    data = ["task.name=dataset", f"task.data.path={tmp_path / 'd.parquet'}", "task.data.prompt=q",
            "task.data.answer=solution", "model.preset=nano", "stages=[rl]"]
    result = runner.invoke(app, ["train", "configs/quickstart.yaml", *data,
                                 "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
                                 "rl.save_episodes=true", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["eval_after_rl"]) >= {"accuracy", "correct", "format"}
    episodes = [json.loads(line) for line in open(tmp_path / "run" / "episodes.jsonl")]
    assert len(episodes) == 4
    assert {e["meta"]["reference"] for e in episodes} <= {str(2 * i) for i in range(40)}
    result = runner.invoke(app, ["eval", str(tmp_path / "run" / "rl_model"), "--config",
                                 "configs/quickstart.yaml", *data])
    assert result.exit_code == 0, result.output
    assert "accuracy" in json.loads(result.output[result.output.index("{"):])


def test_a_user_reward_reads_columns_and_its_failures_are_counted_not_fatal(tmp_path):
    rows = [{"prompt": f"Say {i}.", "answer": str(i), "level": int(i % 4 > 0)} for i in range(20)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(
        "def by_level(completion, level):\n"
        "    if level == 1:\n"
        "        raise ValueError('odd rows are not scored')\n"
        "    return float(len(completion) > 0)\n")
    result = runner.invoke(app, [
        "train", "configs/quickstart.yaml", "task.name=dataset",
        f"task.data.path={tmp_path / 'd.jsonl'}", "model.preset=nano", "stages=[rl]",
        "rl.steps=1", "rl.prompts_per_step=4", "rl.group_size=2", "rl.save_episodes=true",
        "eval.num_problems=2", "reward.parts={}",
        f"reward.parts.mine.verifier={tmp_path / 'rewards.py'}:by_level",
        "reward.accuracy_part=mine", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    episodes = [json.loads(line) for line in open(tmp_path / "run" / "episodes.jsonl")]
    odd = [e for e in episodes if "missing_parts" in e["meta"]]
    assert odd and all(e["meta"]["missing_reasons"]["mine"] ==
                       "ValueError: odd rows are not scored" for e in odd)
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    rl = next(m for m in metrics if m["stage"] == "rl")
    assert rl["reward/mine/missing"] == len(odd) / len(episodes)
