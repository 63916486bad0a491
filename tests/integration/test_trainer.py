import copy
import math
import warnings

import pytest
import torch

from posttrain.algos import get
from posttrain.config import ActorConfig, KLConfig, OptimConfig, TrainerConfig
from posttrain.engines import TorchEngine
from posttrain.models import encode_prompt
from posttrain.train import (
    PolicySteps,
    Trainer,
    TrainingDivergedError,
    latest_checkpoint,
    load_checkpoint_state,
    lr_factor,
    policy_steps,
    save_checkpoint,
    sft_step,
)
from posttrain.types import Batch, Episode, SamplingParams, Segment

# Two float32 computations of the same quantity in different orders (micro-batches,
# recomputation, another code path) differ by rounding only. Bounds, relative to the largest
# value compared: 16 eps32 for a forward value (~8 chained float32 reductions through the 2-layer
# model, head and logsumexp, ~2 eps32 each), 32 eps32 for a gradient (forward and backward).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def loss_scale(batch):
    """The size of an RL loss's terms: mean |advantage| over the loss tokens (ratios ~1)."""
    return float((batch.advantages.abs() * batch.loss_mask).sum() / batch.loss_mask.sum())


def logp_scale(batch):
    """Mean |behaviour log-prob| over the loss tokens."""
    return float((batch.behaviour_logprobs.abs() * batch.loss_mask).sum()
                 / batch.loss_mask.sum())


def rl_batch(model, tok, n_prompts=3, group=4, seed=0):
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    ps = [encode_prompt(tok, [{"role": "user", "content": f"What is {i}+{i}?"}])
          for i in range(n_prompts)]
    outs = engine.generate([p for p in ps for _ in range(group)],
                           SamplingParams(max_new_tokens=8, seed=seed))
    g = torch.Generator().manual_seed(seed)
    eps = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)],
                   reward=float(torch.rand((), generator=g)), group_id=str(j // group))
           for j, o in enumerate(outs)]
    b = Batch.from_episodes(eps, tok.pad_token_id)
    adv = get("advantage", "grpo")(rewards=b.rewards, group_ids=b.group_index, mask=b.loss_mask)
    return b.replace(advantages=adv, old_logprobs=b.behaviour_logprobs)


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_micro_batching_gives_same_update(model, tokenizer, agg):
    batch = rl_batch(model, tokenizer)
    cfg = ActorConfig(loss_agg_mode=agg)
    updated = []
    for mbs in (len(batch), 5, 1):
        m = copy.deepcopy(model)
        tr = Trainer(m, OptimConfig(lr=1e-2, grad_clip=None), 10,
                     TrainerConfig(micro_batch_size=mbs))
        stats = policy_steps(tr, batch, PolicySteps(cfg))
        updated.append((torch.cat([p.grad.flatten() for p in m.parameters()]), stats))
    ref_g, ref_stats = updated[0]
    assert ref_g.abs().max() > 1e-3
    for g, stats in updated[1:]:
        torch.testing.assert_close(g, ref_g, atol=32 * EPS32 * float(ref_g.abs().max()), rtol=0)
        # the loss sums +-A rho / N terms that cancel (it is ~0): bound by their size
        assert stats["loss"] == pytest.approx(ref_stats["loss"], abs=16 * EPS32 * loss_scale(batch))
        # a mean of 0/1 flags: <= 12 micro-batch shares k/N, each rounded once (0.5 eps32)
        assert stats["clip_frac"] == pytest.approx(ref_stats["clip_frac"], abs=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients(model, tokenizer):
    batch = rl_batch(model, tokenizer)
    grads = []
    for checkpointing in (False, True):
        m = copy.deepcopy(model)
        tr = Trainer(m, OptimConfig(lr=1e-2, grad_clip=None), 10, TrainerConfig(
            share_prefix=False, gradient_checkpointing=checkpointing))
        calls, mlp = [], m.model.layers[0].mlp
        mlp.forward = lambda *args, run=mlp.forward, **kw: calls.append(1) or run(*args, **kw)
        loss = policy_steps(tr, batch, PolicySteps(ActorConfig()))["loss"]
        grads.append((torch.cat([p.grad.flatten() for p in m.parameters()]), loss))
        assert len(calls) == (2 if checkpointing else 1)  # recomputed in the backward pass
    torch.testing.assert_close(grads[1][0], grads[0][0],
                               atol=32 * EPS32 * float(grads[0][0].abs().max()), rtol=0)
    assert grads[1][1] == pytest.approx(grads[0][1], abs=16 * EPS32 * loss_scale(batch))
    assert grads[0][0].abs().max() > 0
    with pytest.raises(ValueError, match="share_prefix=false"):
        TrainerConfig(gradient_checkpointing=True)


def test_rl_metrics_and_ppo_epochs(model, tokenizer):
    batch = rl_batch(model, tokenizer)
    tr = Trainer(model, OptimConfig(lr=5e-2), 10, TrainerConfig(micro_batch_size=4))
    first = policy_steps(tr, batch)
    # approx_kl: the mean of engine-minus-trainer log-prob differences (float32 rounding)
    assert first["clip_frac"] == 0.0 and abs(first["approx_kl"]) < 16 * EPS32 * logp_scale(batch)
    assert {"loss", "pg_loss", "entropy", "grad_norm", "lr"} <= set(first)
    again = policy_steps(tr, batch, PolicySteps(epochs=2, mini_batches=2))
    assert tr.step == 5
    assert again["clip_frac"] > 0 and again["approx_kl"] != 0


def test_on_policy_step_equals_step_with_recomputed_old_logprobs(model, tokenizer):
    batch = rl_batch(model, tokenizer).replace(old_logprobs=None)
    grads, stats = [], []
    for old in (None, "recompute"):
        m = copy.deepcopy(model)
        tr = Trainer(m, OptimConfig(lr=1e-2, grad_clip=None), 10, TrainerConfig(micro_batch_size=5))
        b = batch if old is None else batch.replace(old_logprobs=tr.compute_logprobs(batch))
        stats.append(policy_steps(tr, b))
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], atol=32 * EPS32 * float(grads[1].abs().max()),
                               rtol=0)
    assert stats[0]["approx_kl"] == 0.0
    # the engine sampled from the same weights: its log-probs match the trainer's up to float32
    # rounding (mean |difference| <= 16 eps32 of the log-probs' size)
    assert stats[0]["mismatch"] == pytest.approx(stats[1]["mismatch"],
                                                 abs=16 * EPS32 * logp_scale(batch))
    assert stats[0]["mismatch"] < 16 * EPS32 * logp_scale(batch)
    tr = Trainer(copy.deepcopy(model), OptimConfig(), 10)
    with pytest.raises(ValueError, match="need batch.old_logprobs"):
        policy_steps(tr, batch, PolicySteps(epochs=2))


def test_kl_term_needs_reference_and_reports_it(model, tokenizer):
    batch = rl_batch(model, tokenizer)
    kl = KLConfig(coef=0.1, estimator="k3")
    tr = Trainer(model, OptimConfig(), 10, ref_model=copy.deepcopy(model))
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_steps(tr, batch, PolicySteps(kl=kl))
    ref = tr.compute_logprobs(batch, reference=True)
    stats = policy_steps(tr, batch.replace(ref_logprobs=ref), PolicySteps(kl=kl))
    # k3 = e^r - 1 - r at r ~ 0 in float32: rounding e^r near 1 leaves <= ~2 eps32 a token
    assert stats["ref_kl"] == pytest.approx(0.0, abs=8 * EPS32)
    with pytest.raises(ValueError, match="reference"):
        Trainer(model, OptimConfig(), 1).compute_logprobs(batch, reference=True)


def test_nan_loss_skips_step_then_aborts(model, tokenizer):
    batch = rl_batch(model, tokenizer)
    bad = batch.replace(advantages=batch.advantages * float("nan"))
    tr = Trainer(model, OptimConfig(lr=1e-2), 10, TrainerConfig(max_bad_steps=2))
    before = [p.detach().clone() for p in model.parameters()]
    for i in range(2):
        stats = policy_steps(tr, bad)
        assert stats["skipped"] == 1.0 and stats["bad_steps"] == i + 1
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert tr.step == 0
    assert policy_steps(tr, batch)["skipped"] == 0.0  # a good step resets the streak
    for _ in range(2):
        policy_steps(tr, bad)
    with pytest.raises(TrainingDivergedError, match="max_bad_steps=2"):
        policy_steps(tr, bad)


def test_lr_schedule_warmup_then_cosine():
    cfg = OptimConfig(lr=1.0, warmup_steps=4, schedule="cosine", min_lr_ratio=0.1)
    assert [lr_factor(s, 14, cfg) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(9, 14, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))
    assert lr_factor(14, 14, cfg) == pytest.approx(0.1)
    assert lr_factor(100, 14, OptimConfig(schedule="constant")) == 1.0


def test_sft_step_lowers_loss(model, tokenizer):
    from posttrain.data.conversations import conversation_segment

    conv = [{"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "<answer>4</answer>"}]
    b = Batch.from_episodes([Episode([conversation_segment(tokenizer, conv)])] * 4,
                            tokenizer.pad_token_id)
    tr = Trainer(model, OptimConfig(lr=1e-2, grad_clip=None), 20, TrainerConfig(micro_batch_size=3))
    losses = [sft_step(tr, b)["loss"] for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]


def test_checkpoint_is_atomic_and_latest(tmp_path, model, tokenizer):
    tr = Trainer(model, OptimConfig(), 10)
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / ".tmp-rl-000009").mkdir()  # a crashed write is ignored
    p1 = save_checkpoint(tmp_path, tr, tokenizer, {"step": 1}, "rl-000001")
    p2 = save_checkpoint(tmp_path, tr, tokenizer, {"step": 2}, "rl-000002")
    assert latest_checkpoint(tmp_path) == p2 and p1.is_dir()
    assert (p2 / "model.safetensors").is_file() and (p2 / "tokenizer.json").is_file()
    assert load_checkpoint_state(p2, tr) == {"step": 2}


ACTOR_LOSS_SETTINGS = {
    "ppo_clip": {}, "gspo": {}, "ecpo": {}, "gbpo": {}, "sapo": {}, "cispo": {"r_max": 2.0},
    "reinforce": {}, "mimo_is_pg": {}, "kimi_k25": {"alpha": 0.5, "beta": 1.5, "tau": 0.1},
    "clip_cov": {"cov_ratio": 0.1, "cov_low": 0.0}, "kl_cov": {"cov_ratio": 0.1},
}


@pytest.mark.parametrize("name", sorted(ACTOR_LOSS_SETTINGS))
def test_every_actor_loss_trains_through_the_trainer(model, tokenizer, name):
    from posttrain.config.sections.trainer import ACTOR_LOSSES

    assert set(ACTOR_LOSSES) == set(ACTOR_LOSS_SETTINGS)
    agg = "seq_mean_token_mean" if name == "gspo" else "token_mean"
    cfg = ActorConfig(policy_loss={"name": name, **ACTOR_LOSS_SETTINGS[name]}, loss_agg_mode=agg)
    batch = rl_batch(model, tokenizer)
    tr = Trainer(model, OptimConfig(lr=1e-2), 10, TrainerConfig(micro_batch_size=4))
    before = [p.detach().clone() for p in model.parameters()]
    stats = policy_steps(tr, batch, PolicySteps(cfg))
    assert stats["skipped"] == 0.0 and math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_adaptive_entropy_bonus_follows_the_controller(model, tokenizer):
    batch = rl_batch(model, tokenizer)
    tr = Trainer(model, OptimConfig(lr=1e-4), 10, TrainerConfig(micro_batch_size=4))
    always_low = ActorConfig(entropy_bonus={"adaptive": True, "target": 1e6, "delta": 0.005})
    applied = [policy_steps(tr, batch, PolicySteps(always_low))["entropy_coef"] for _ in range(3)]
    assert applied == pytest.approx([0.0, 0.005, 0.01])  # lagged one step: no entropy yet at 0
    never_low = ActorConfig(entropy_bonus={"adaptive": True, "target": 1e-9})
    assert policy_steps(tr, batch, PolicySteps(never_low))["entropy_coef"] == pytest.approx(0.015)
    assert policy_steps(tr, batch, PolicySteps(never_low))["entropy_coef"] == 0.0
    kept = tr.state_dict()["objective_state"]["rl"]
    assert kept["entropy_alpha"] == pytest.approx(0.015)  # alpha is kept
    older = {k: v for k, v in tr.state_dict().items() if k != "objective_state"} | kept
    resumed = Trainer(model, OptimConfig(lr=1e-4), 10, TrainerConfig(micro_batch_size=4))
    resumed.load_state_dict(older)  # a checkpoint written before objective_state
    assert resumed.objective_state["rl"] == kept


def test_a_covariance_loss_warns_of_a_one_sequence_micro_batch(model, tokenizer):
    """clip_cov's covariances are taken within a micro-batch; 6 rows in micro-batches of 5
    leave one of 1 row, which still trains, with a warning (micro-batches of 1 are refused
    at config time)."""
    cfg = ActorConfig(policy_loss={"name": "clip_cov"})
    tr = Trainer(model, OptimConfig(lr=1e-2), 10, TrainerConfig(micro_batch_size=5))
    with pytest.warns(UserWarning, match="a micro-batch of one sequence"):
        policy_steps(tr, rl_batch(model, tokenizer, n_prompts=3, group=2), PolicySteps(cfg))
    tr = Trainer(model, OptimConfig(lr=1e-2), 10, TrainerConfig(micro_batch_size=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy_steps(tr, rl_batch(model, tokenizer), PolicySteps(cfg))
