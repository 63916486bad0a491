"""A user's dataset through the CLI: RL on its prompts and `posttrain eval` on its held-out
rows, with every column kept in the episode record."""

import json
import subprocess
import sys

import datasets
import pytest
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
                                 "configs/quickstart.yaml", *data, "eval.samples=3",
                                 "eval.temperature=1", "eval.group_by=[source]",
                                 "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output[result.output.index("{"):])
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert printed == summary
    assert {"pass@1", "pass@3", "maj@3", "mean@3", "pass@3_se"} <= set(summary)
    samples = [json.loads(line) for line in open(tmp_path / "eval" / "samples.jsonl")]
    assert len(samples) == 4 * 3 and samples[5]["problem"] == 1 and samples[5]["sample"] == 2
    by_question = {r["q"]: r for r in rows}
    problems = {}  # each held-out problem's row, found in the data by its question
    for s in samples:
        row = by_question[s["prompt"][-1]["content"]]
        assert s["row"] == row
        problems.setdefault(s["problem"], []).append((row["source"], s["rewards"]["correct"]))
    sources = {src for ps in problems.values() for src, _ in ps}
    assert sources == {"doubles", "x"}  # the seeded split holds both: two groups to split
    assert {k for k in summary if "/source=" in k} == \
        {f"{m}/source={v}" for v in sources for m in ("accuracy", "pass@3")}
    for v in sources:  # exact by construction: sums of 0/1 rewards, one division
        mine = [ps for ps in problems.values() if ps[0][0] == v]
        assert summary[f"accuracy/source={v}"] == \
            sum(c for ps in mine for _, c in ps) / sum(map(len, mine))
        assert summary[f"pass@3/source={v}"] == \
            sum(max(c for _, c in ps) > 0 for ps in mine) / len(mine)


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


@pytest.mark.slow
def test_the_worked_example_learns_on_its_own_data(tmp_path):
    """configs/gsm8k_style.yaml, reduced: data written by the example's script, SFT on its
    chat rows, GRPO with math-verify and the example's own reward, pass@k evaluation."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, "examples/gsm8k_style/make_data.py", str(data),
                    "--train", "1000", "--test", "100", "--sft", "5000"], check=True,
                   capture_output=True)
    result = runner.invoke(app, [
        "train", "configs/gsm8k_style.yaml", f"task.data.path={data / 'train.jsonl'}",
        f"task.data.eval_path={data / 'test.jsonl'}", f"sft.data={data / 'sft.jsonl'}",
        "sft.steps=350", "rl.steps=20", "rl.eval_every=0", "eval.samples=2",
        "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    sft, rl = summary["eval_after_sft"], summary["eval_after_rl"]
    assert rl["pass@1"] > sft["pass@1"], (sft, rl)
    assert {"pass@2", "maj@2", "mean@2", "accuracy/carries=0", "work"} <= set(rl)
    assert rl["reward/correct/missing"] == 0.0
