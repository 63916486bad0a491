"""``posttrain config explain``'s arithmetic is what a run does: a short SFT -> DPO -> RL run
with several micro-batches, mini-batches, epochs, checkpoints and evaluations counts the same
optimiser steps, micro-batches, checkpoints and evaluations as the plan printed before it."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app

OVERRIDES = [
    "stages=[sft, pref, rl]", "model.preset=nano", "threads=1", "checkpoint_every=2",
    "keep_last=1", "trainer.micro_batch_size=3",
    "sft.steps=3", "sft.batch_size=5", "sft.num_examples=40",
    "pref.steps=3", "pref.batch_size=4", "pref.num_pairs=16", "pref.eval_pairs=4",
    "pref.eval_every=2",
    "rl.steps=3", "rl.prompts_per_step=2", "rl.group_size=4", "rl.max_new_tokens=6",
    "rl.epochs=2", "rl.mini_batches=3", "rl.eval_every=2", "eval.num_problems=4",
]


@pytest.mark.plots
def test_the_plan_is_what_the_run_counts(tmp_path):
    runner = CliRunner()
    explained = runner.invoke(app, ["config", "explain", "configs/quickstart.yaml",
                                    *OVERRIDES, "--json"])
    assert explained.exit_code == 0, explained.output
    plans = {p["stage"]: p for p in json.loads(explained.stdout)["stages"]}
    out = tmp_path / "run"
    trained = runner.invoke(app, ["train", "configs/quickstart.yaml", *OVERRIDES,
                                  f"out_dir={out}"])
    assert trained.exit_code == 0, trained.output
    counted = json.loads((out / "summary.json").read_text())["counters"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert list(plans) == list(counted) == ["sft", "pref", "rl"]
    assert all((out / f"curves_{stage}.png").stat().st_size > 10_000 for stage in plans)
    for stage, plan in plans.items():
        assert counted[stage] == {
            "optimizer_steps": plan["optimizer_steps"],
            "micro_batches": plan["micro_batches"],
            "checkpoints": plan["checkpoints"]}, stage
        evals = sum(1 for m in metrics if m["stage"] == stage
                    and any(k.startswith("eval/") for k in m))
        assert evals == plan["evals"], stage
    # the arithmetic itself: RL's 2 x 4 rows in 3 mini-batches (3, 3, 2 rows) for 2 epochs,
    # micro-batches of 3 rows: 6 optimiser steps and 6 micro-batches a step
    assert (plans["rl"]["optimizer_steps"], plans["rl"]["micro_batches"]) == (18, 18)
    # DPO: 4 pairs = 8 rows in micro-batches of 2 rows (pairs whole): 4 a step
    assert plans["pref"]["micro_batches"] == 12
    assert plans["sft"]["checkpoints"] == 1 and plans["rl"]["evals"] == 2
