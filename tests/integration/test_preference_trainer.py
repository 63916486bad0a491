"""The preference trainer: every paired loss of ALGORITHMS.md §8 through the trainer equals its
formula on the model's own sequence log-probs; precomputed and on-the-fly references agree;
DPO learns held-out arithmetic preferences; malformed rows are skipped and counted."""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F

from posttrain.config import OptimConfig, PreferenceConfig, TrainerConfig
from posttrain.data.conversations import batch_indices
from posttrain.data.preference_pairs import (
    arithmetic_pairs,
    load_preference_data,
    mismatched_batch,
    pair_batch,
    parse_pair,
)
from posttrain.envs import ArithmeticTasks
from posttrain.recipes.dpo import preference_eval, run_preference
from posttrain.reporting import Reporter
from posttrain.train import Trainer, preference_step
from posttrain.types import DataError

TASKS = ArithmeticTasks(("+",), 2, 0, 0.1)


def formula(name, lw, ll, rw, rl, nw, nl):
    """ALGORITHMS.md §8, written out on plain floats."""
    h = (lw - rw) - (ll - rl)
    sig = lambda x: -math.log(1 / (1 + math.exp(-x)))  # noqa: E731  (-log sigmoid)
    if name == "dpo":
        return sig(0.1 * h)
    if name == "ipo":
        return (h - 1 / (2 * 0.1)) ** 2
    if name == "simpo":
        return sig(2.0 * lw / nw - 2.0 * ll / nl - 0.5)
    if name == "cpo":
        return sig(0.1 * (lw - ll)) - 1.0 * lw
    if name == "r_dpo":
        return sig(0.1 * h + 0.01 * (nw - nl))
    if name == "kto":  # z_ref = 0; the pair's two rows, averaged
        sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
        return ((1 - sigmoid(0.1 * (lw - rw))) + (1 - sigmoid(-0.1 * (ll - rl)))) / 2
    odds = lambda m: m - math.log1p(-math.exp(m))  # noqa: E731
    return -lw / nw + 0.1 * sig(odds(lw / nw) - odds(ll / nl))  # orpo


@pytest.mark.parametrize("name", ["dpo", "ipo", "simpo", "orpo", "cpo", "r_dpo", "kto"])
def test_each_loss_through_the_trainer_equals_its_formula(name, model, tokenizer):
    options = {"alpha": 0.01} if name == "r_dpo" else {}
    ref = copy.deepcopy(model)
    with torch.no_grad():  # a reference that differs from the policy
        for p in ref.parameters():
            p.mul_(0.9)
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2),
                      ref_model=ref)
    batch = pair_batch(tokenizer, arithmetic_pairs(TASKS, 3, seed=1))
    mask = batch.loss_mask
    ell = (trainer.compute_logprobs(batch) * mask).sum(1).tolist()
    ref_ell = (trainer.compute_logprobs(batch, reference=True) * mask).sum(1).tolist()
    n = mask.sum(1).tolist()
    want = sum(formula(name, ell[2 * i], ell[2 * i + 1], ref_ell[2 * i], ref_ell[2 * i + 1],
                       n[2 * i], n[2 * i + 1]) for i in range(3)) / 3
    batch = batch.replace(ref_logprobs=trainer.compute_logprobs(batch, reference=True))
    got = preference_step(trainer, batch, name, options)["loss"]  # 2 micro-batches of pairs
    # the losses take differences of float32 sequence log-prob sums (|ell| < 150, 1 ulp =
    # 1.5e-5): through beta = 0.1 (IPO: 2 |h - 5| < 10 on a loss ~25) < 1e-5 of the loss
    assert got == pytest.approx(want, rel=1e-4)


def test_kto_takes_its_reference_point_from_mismatched_pairs(model, tokenizer, tmp_path):
    pairs = arithmetic_pairs(TASKS, 4, seed=4)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.lm_head.weight.mul_(0.5)  # a flatter reference: the policy's KL to it is positive
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, ref_model=ref)
    step_pairs = [pairs[i] for i in batch_indices(0, 4, 4, seed=0)]  # step 1's order
    mis = mismatched_batch(tokenizer, step_pairs)
    assert tokenizer.decode(mis.input_ids[0]).count(step_pairs[1].chosen) == 1
    lp, lp_ref = trainer.compute_logprobs(mis), trainer.compute_logprobs(mis, reference=True)
    gap = ((lp - lp_ref) * mis.loss_mask).sum(1)
    want = max(0.0, 0.1 * float(gap.mean()))
    # the recipe sums each row's log-probs before subtracting (here: after), so the two differ
    # by float32 rounding of sums of size S = sum |lp| + |lp_ref| (~200), not of the small gap:
    # within 8 eps32 S (a few roundings of partial sums <= S), times beta = 0.1
    size = float(((lp.abs() + lp_ref.abs()) * mis.loss_mask).sum(1).max())
    tol = 0.1 * 8 * torch.finfo(torch.float32).eps * size
    cfg = dpo_config(steps=1, loss={"name": "kto"}, log_every=1)
    run_preference(trainer, tokenizer, pairs, cfg, Reporter(tmp_path, quiet=True))
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().split("\n")
              if line]
    assert want > 0 and row["kto_reference_point"] == pytest.approx(want, abs=tol)


def dpo_config(**changes):
    return PreferenceConfig.model_validate({"steps": 6, "batch_size": 4, "eval_every": 0,
                                            "optim": {"lr": 1e-3, "warmup_steps": 0},
                                            **changes})


def test_precomputed_and_on_the_fly_references_agree(model, tokenizer, tmp_path):
    pairs = arithmetic_pairs(TASKS, 10, seed=2)
    # float64: the two modes batch the reference differently (other padding), which in float32
    # changes its log-probs by ~eps32 on some processors, and Adam's m / (sqrt(v) + eps)
    # amplifies that by up to lr / eps_adam on near-zero gradients
    model = model.to(torch.float64)
    finals = []
    for mode in ("precompute", "on_the_fly"):
        policy = copy.deepcopy(model)
        trainer = Trainer(policy, OptimConfig(lr=1e-3), 6, ref_model=copy.deepcopy(model))
        run_preference(trainer, tokenizer, pairs, dpo_config(reference=mode),
                       Reporter(tmp_path / mode, quiet=True))
        finals.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    # The reference log-probs are float32 (sequence_logprobs casts the logits) of float64
    # logits that the two batchings give to within a few eps64 (2.2e-16): equal after rounding
    # (unless a logit sits that close to a float32 rounding boundary, ~1e-9 a logit), so the
    # runs are the same float64 arithmetic. atol allows a reordered float64 sum in a gradient
    # entry (< 1000 terms, each < 1: < 1000 * 2.2e-16 = 2.2e-13), which Adam turns into at most
    # lr * 2.2e-13 / eps_adam = 1e-3 * 2.2e-13 / 1e-8 = 2.2e-8 a step: 1.3e-7 over 6 steps.
    torch.testing.assert_close(finals[0], finals[1], atol=1.3e-7, rtol=0)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert float((finals[0] - start).abs().max()) > 1e-4


def test_dpo_learns_held_out_preferences(model, tokenizer, tmp_path):
    cfg = dpo_config(steps=30, batch_size=16, eval_every=30,
                     optim={"lr": 5e-4, "warmup_steps": 5})
    held_out = arithmetic_pairs(TASKS, 64, seed=0, split="eval")
    trainer = Trainer(model, cfg.optim, cfg.steps, ref_model=copy.deepcopy(model))
    before = preference_eval(trainer, tokenizer, held_out, cfg)
    (after,) = run_preference(trainer, tokenizer, arithmetic_pairs(TASKS, 500, seed=0), cfg,
                              Reporter(tmp_path, quiet=True), held_out)
    assert before["reward_accuracy"] == 0 and before["loss"] == pytest.approx(math.log(2))
    assert after["reward_accuracy"] > 0.9 and after["loss"] < 0.6


def test_a_reference_loss_without_a_reference_model_is_an_error(model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="'dpo' needs a reference model"):
        run_preference(Trainer(model, OptimConfig(), 1), tokenizer,
                       arithmetic_pairs(TASKS, 2, seed=0), dpo_config(),
                       Reporter(tmp_path, quiet=True))


def test_malformed_rows_are_skipped_and_counted(tmp_path):
    """Both TRL forms (a file of one form: ``datasets`` wants one type per column)."""
    explicit = [
        {"prompt": "What is 1+1?", "chosen": "2", "rejected": "3"},
        {"prompt": "What is 1+1?", "chosen": "2"},  # no rejected
        {"prompt": "x", "chosen": "same", "rejected": "same"},
    ]
    conversational = [
        {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}],
         "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "b"}]},
        {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}],
         "rejected": [{"role": "user", "content": "yo"}, {"role": "assistant", "content": "b"}]},
    ]
    for name, rows in (("explicit", explicit), ("conversational", conversational)):
        (tmp_path / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = load_preference_data(tmp_path / "explicit.jsonl")
    assert [p.chosen for p in data.pairs] == ["2"]
    assert [(i, why) for i, why in data.skipped] == [
        (1, "row needs 'chosen' and 'rejected'"), (2, "chosen and rejected are the same response")]
    data = load_preference_data(tmp_path / "conversational.jsonl")
    assert data.pairs[0].prompt == ({"role": "user", "content": "hi"},)
    assert [i for i, _ in data.skipped] == [1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(explicit[1]) + "\n")
    with pytest.raises(DataError, match="holds no usable row"):
        load_preference_data(bad)
    with pytest.raises(ValueError, match="'chosen' and 'rejected'"):
        parse_pair({"prompt": "p", "rejected": "r"})


def test_logsigmoid_reference_helper_matches_torch():
    assert -math.log(1 / (1 + math.exp(-0.3))) == pytest.approx(float(-F.logsigmoid(
        torch.tensor(0.3))))


class Interrupt(Exception):
    pass


def test_an_interrupted_run_resumes_exactly(tiny_dir, tokenizer, tmp_path):
    from posttrain.models import load_model
    from posttrain.train import latest_checkpoint, load_checkpoint_state, save_checkpoint

    pairs, cfg = arithmetic_pairs(TASKS, 12, seed=3), dpo_config(steps=4)

    def run(out, stop_at=None, resume=False):
        ckpt = latest_checkpoint(out / "ckpt") if resume else None
        trainer = Trainer(load_model(ckpt or tiny_dir), cfg.optim, cfg.steps,
                          ref_model=load_model(tiny_dir))
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0

        def on_step_end(step):
            save_checkpoint(out / "ckpt", trainer, tokenizer, {"step": step}, f"pref-{step}")
            if step == stop_at:
                raise Interrupt

        run_preference(trainer, tokenizer, pairs, cfg, Reporter(out, quiet=True),
                       start_step=start, on_step_end=on_step_end)
        return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])

    straight = run(tmp_path / "a")
    with pytest.raises(Interrupt):
        run(tmp_path / "b", stop_at=2)
    assert torch.equal(run(tmp_path / "b", resume=True), straight)
