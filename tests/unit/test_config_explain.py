"""``config explain``: each value's source, and each stage's arithmetic checked by hand."""

import pytest

from posttrain.config import load_config
from posttrain.config.explain import leaves, plan, sources, split_sizes


def test_each_value_names_the_file_an_override_or_the_default(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rl:\n  steps: 7\n  optim:\n    lr: 0.01\nreward:\n  shaping: []\n")
    overrides = ["rl.group_size=4", "reward.parts={correct: {verifier: numeric}}"]
    cfg = load_config(path, overrides)
    resolved = cfg.model_dump(mode="json", by_alias=True)
    found = sources(resolved, {"rl": {"steps": 7, "optim": {"lr": 0.01}},
                               "reward": {"shaping": []}}, overrides)
    assert {k: v for k, (v, _) in found.items()} == dict(leaves(resolved))
    where = {k: source for k, (_, source) in found.items()}
    assert (where["rl.steps"], where["rl.optim.lr"], where["reward.shaping"]) == ("file",) * 3
    assert where["rl.group_size"] == "override"
    parts = ("reward.parts.correct.verifier", "reward.parts.correct.weight")
    assert [where[k] for k in parts] == ["override", "override"]
    assert where["rl.prompts_per_step"] == where["rl.optim.weight_decay"] == "default"


def test_a_split_is_the_batch_split():
    assert split_sizes(10, 3) == [4, 4, 2] and split_sizes(12, 2) == [6, 6]
    assert split_sizes(3, 5) == [1, 1, 1]  # ceil(3 / 5) = 1 row a part


@pytest.mark.parametrize("processes", [1, 2])
def test_rl_arithmetic_by_hand(processes):
    cfg = load_config(None, [
        "rl.steps=5", "rl.prompts_per_step=3", "rl.group_size=4", "rl.max_new_tokens=10",
        "rl.epochs=3", "rl.mini_batches=2", "rl.eval_every=2", "checkpoint_every=2",
        "trainer.micro_batch_size=4", f"dist.trainer_processes={processes}"])
    sft, rl = plan(cfg)
    # 3 x 4 = 12 rows, 2 mini-batches of 6 rows, each 2 micro-batches of <= 4 rows; 3 epochs
    assert (rl.rows_per_step, rl.optimizer_steps_per_step) == (12, 6)
    assert (rl.micro_batches_per_step, rl.micro_batches_per_optimizer_step) == (12, 2)
    assert (rl.optimizer_steps, rl.micro_batches) == (30, 60)
    assert rl.micro_batches_per_process == 2 // processes
    assert rl.sampled_tokens_per_step == 120
    assert rl.checkpoints == 2 and rl.evals == 3  # after steps 2 and 4; after 2, 4 and 5
    # the quickstart's SFT: 64 conversations in micro-batches of 4, 500 steps
    assert (sft.rows_per_step, sft.micro_batches_per_step, sft.optimizer_steps) == (64, 16, 500)
    assert sft.sampled_tokens_per_step is None and sft.checkpoints == 250 and sft.evals == 0


def test_pairs_stay_whole_and_notes_say_where_the_counts_may_differ():
    cfg = load_config(None, [
        "stages=[sft, pref, rl]", "pref.batch_size=5", "pref.steps=4", "pref.eval_every=3",
        "trainer.micro_batch_size=3", "sft.pack_tokens=256",
        "algo.dynamic_sampling.enabled=true"])
    sft, pref, rl = plan(cfg)
    # 5 pairs = 10 rows; a micro-batch of 3 rows would split a pair: 2 rows, 5 micro-batches
    assert (pref.rows_per_step, pref.micro_batches_per_step, pref.evals) == (10, 5, 2)
    assert "pack_tokens" in sft.notes[0] and "dynamic sampling" in rl.notes[0]


def test_a_pretrained_model_at_a_tiny_models_learning_rate_is_noted(tiny_dir):
    own = [f"model.path={tiny_dir}", "stages=[sft, rl]"]
    sft, rl = plan(load_config(None, own))
    assert "optim.lr=0.003 is the default" in sft.notes[0] and "1e-5 to 2e-5" in sft.notes[0]
    assert "optim.lr=0.0001 is the default" in rl.notes[0]
    sft, rl = plan(load_config(None, [*own, "rl.optim.lr=2e-5"]))
    assert sft.notes and not rl.notes  # chosen: no note
    assert not any(p.notes for p in plan(load_config(None, ["stages=[sft, rl]"])))  # a preset
    lora = plan(load_config(None, [*own, "trainer.lora={r: 8}"]))
    assert not any(p.notes for p in lora)  # adapters take larger rates
