"""Data curation: pass rates over k samples, the pass-rate filter, best-of-k SFT rows,
best-over-worst preference pairs, and the commands end to end."""

import json
import random

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.curate import write_rows
from posttrain.data.conversations import load_chat_data
from posttrain.data.curation import (
    best_row,
    filter_row,
    in_range,
    pair_row,
    sample_prompts,
)
from posttrain.data.preference_pairs import load_preference_data, parse_pair
from posttrain.engines import GenerationOutput
from posttrain.envs import ArithmeticTasks
from posttrain.rewards import RewardFunction
from posttrain.rollout.single_turn import rollout
from posttrain.types import SamplingParams

K = 4
TASKS = ArithmeticTasks(("+",), 2, 0, 0.1)


class KnownSkillEngine:
    """Answers problem a+b right in the first (a + b) % (K + 1) samples of its group."""

    version = 0

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, sampling, seeds=None):
        outs, run = [], 0
        for i, p in enumerate(prompts):
            run = run + 1 if i and prompts[i - 1] == p else 0
            a, b = self.tokenizer.decode(p).split("What is ")[1].split("?")[0].split("+")
            right = run < (int(a) + int(b)) % (K + 1)
            answer = int(a) + int(b) + (0 if right else 1)
            ids = self.tokenizer.encode(f"<answer>{answer}</answer>", add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            outs.append(GenerationOutput(list(p), ids, [0.0] * len(ids), "stop", 0))
        return outs


def test_pass_rates_filter_best_of_k_and_pairs(tokenizer, tmp_path):
    tasks = TASKS.sample(12, random.Random(0))
    reward = RewardFunction({"correct": ("numeric", 1.0)})
    samples = list(sample_prompts(KnownSkillEngine(tokenizer), tokenizer, tasks, reward,
                                  rollout, K, SamplingParams(max_new_tokens=8), "correct",
                                  chunk=5))
    expected = [min((t.a + t.b) % (K + 1), K) / K for t in tasks]
    assert [s.pass_rate for s in samples] == expected
    kept = [filter_row(s) for s in samples if in_range(s.pass_rate, None, None)]
    assert [r["pass_rate"] for r in kept] == [p for p in expected if 0 < p < 1]
    assert all(r["k"] == K and r["reference"] == t.reference for r, t in
               zip([filter_row(s) for s in samples], tasks))
    assert in_range(0.25, 0.25, None) and not in_range(0.0, None, 0.5)  # explicit: inclusive
    rows = [best_row(s, 1.0) for s in samples]
    for row, p, t in zip(rows, expected, tasks):
        if p == 0:
            assert row is None
        else:
            assert row["messages"][-1]["content"] == f"<answer>{t.a + t.b}</answer>"
    pairs = [pair_row(s, 1.0) for s in samples]
    for row, p, t in zip(pairs, expected, tasks):
        if p in (0, 1):  # nothing to prefer: no right answer, or no wrong one
            assert row is None
            continue
        pair = parse_pair(row)  # the form pref.data reads
        assert pair.chosen == f"<answer>{t.a + t.b}</answer>"
        assert pair.rejected == f"<answer>{t.a + t.b + 1}</answer>"
        assert (row["chosen_reward"], row["rejected_reward"], row["pass_rate"]) == (1.0, 0.0, p)
        assert row["prompt"] == t.messages()
    kept, seen = write_rows(tmp_path / "pairs.jsonl", iter(pairs), lambda row: True)
    loaded = load_preference_data(tmp_path / "pairs.jsonl")  # what pref.data=... reads
    assert (kept, seen) == (sum(0 < p < 1 for p in expected), len(tasks))
    assert [pair.chosen for pair in loaded.pairs] == [r["chosen"][0]["content"] for r in pairs
                                                      if r is not None]


runner = CliRunner()


def test_filter_and_rejection_sample_commands(tiny_dir, tmp_path):
    base = ["configs/quickstart.yaml", "--model", str(tiny_dir), "--k", "2",
            "--num-prompts", "4", f"out_dir={tmp_path / 'run'}", "model.preset=nano",
            "rl.max_new_tokens=6"]
    result = runner.invoke(app, ["filter", *base, "--out", str(tmp_path / "all.jsonl"),
                                 "--min-pass", "0", "--max-pass", "1"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(tmp_path / "all.jsonl")]
    assert len(rows) == 4 and all(r["k"] == 2 and r["pass_rate"] == 0 for r in rows)
    result = runner.invoke(app, ["filter", *base, "--out", str(tmp_path / "mid.jsonl")])
    assert result.exit_code == 0 and (tmp_path / "mid.jsonl").read_text() == ""  # none 0<p<1
    result = runner.invoke(app, ["rejection-sample", *base, "--out", str(tmp_path / "sft.jsonl"),
                                 "--threshold", "0"])
    assert result.exit_code == 0, result.output
    data = load_chat_data(tmp_path / "sft.jsonl")
    assert len(data.conversations) == 4 and data.conversations[0][-1]["role"] == "assistant"
    # the nano model answers nothing right: no best answer reaches the threshold, no pair
    result = runner.invoke(app, ["pair-sample", *base, "--out", str(tmp_path / "pairs.jsonl")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "pairs.jsonl").read_text() == "" and "kept 0 of 4" in result.output


def test_a_missing_model_is_a_clear_error_and_writes_nothing(tmp_path):
    out = tmp_path / "x.jsonl"
    result = runner.invoke(app, ["filter", "configs/quickstart.yaml", "--model",
                                 str(tmp_path / "missing"), "--out", str(out),
                                 f"out_dir={tmp_path / 'run'}"])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
    assert not out.exists() and not list(tmp_path.glob(".x.jsonl*"))


@pytest.mark.parametrize("command", ["rejection-sample", "pair-sample"])
def test_sampling_answers_refuses_agent_tasks(command, tiny_dir, tmp_path):
    result = runner.invoke(app, [command, "configs/calculator.yaml", "--model", str(tiny_dir),
                                 "--out", str(tmp_path / "o.jsonl"),
                                 f"out_dir={tmp_path / 'run'}"])
    assert result.exit_code == 2 and "agent task" in " ".join(result.output.split())
