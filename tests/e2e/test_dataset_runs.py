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
