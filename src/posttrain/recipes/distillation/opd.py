"""On-policy distillation (docs/distillation.md): the student samples, the teachers routed to each
sample score the student's own tokens, and the student moves toward them — by the exact
full-vocabulary reverse KL (``full_vocab_rkl``, optionally top-k) or by a policy gradient on the
per-token advantage ``A_t = sum_k w_k log P_k(y_t) - log Q(y_t)`` (``opd_sampled``,
``opd_clip``, and ``mopd`` with the outcome advantage added).

Step ``k`` draws its prompts and sampling seed from ``(seed, k)`` alone, so a resumed run
repeats the uninterrupted one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from posttrain.algos import LazyInputs, entry
from posttrain.config import ActorConfig, AlgoConfig, OPDConfig
from posttrain.engines import Engine
from posttrain.models import stop_tokens
from posttrain.recipes.build import RunParts
from posttrain.recipes.distillation.teachers import (
    Samples,
    Teacher,
    distribution_targets,
    route,
    sampled_logprobs,
)
from posttrain.recipes.placement import cluster_session, teachers
from posttrain.recipes.sampling_loop import LoopRun
from posttrain.rollout import rollout_metrics
from posttrain.rollout.single_turn import asked, rollout, seek_step
from posttrain.train import PolicySteps, Trainer, distill_step, policy_steps
from posttrain.train.rl_update import compute_advantages
from posttrain.types import Batch
from posttrain.types.sampling import step_seed


@dataclass(kw_only=True)
class OPDRun(LoopRun):
    """On-policy distillation of ``teachers`` into ``trainer``'s model with ``cfg`` (sampled
    losses train with ``actor``'s policy loss)."""

    STAGE: ClassVar[str] = "opd"
    cfg: OPDConfig
    actor: ActorConfig
    teachers: Sequence[Teacher]


def sampled_rkl(logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean ``log Q(y_t) - log P(y_t)`` over sampled tokens: the reverse-KL estimate."""
    return float(((logp - teacher_logp) * mask).sum() / mask.sum().clamp(min=1))


def distill_update(run: OPDRun, samples: Samples) -> dict[str, float]:
    """One optimiser step of ``run.cfg.loss`` on the student's scored samples."""
    cfg, trainer, tokenizer = run.cfg, run.trainer, run.tokenizer
    episodes = list(samples.episodes)
    batch = Batch.from_episodes(episodes, pad_token_id=tokenizer.pad_token_id)
    weights = route(run.teachers, episodes)
    loss = entry("divergence", cfg.loss)
    if loss.takes("student_logp"):  # over the vocabulary: the teachers' distributions
        targets = distribution_targets(run.teachers, weights, samples, tokenizer)
        return trainer.apply(distill_step, batch, targets, cfg.loss, {"topk": cfg.topk})
    teacher_logp = sampled_logprobs(run.teachers, weights, samples, batch, tokenizer)
    logp = trainer.compute_logprobs(batch)
    adv = loss.call(LazyInputs(
        teacher_logp=lambda: teacher_logp, logp=lambda: logp, mask=lambda: batch.loss_mask,
        r_max=lambda: cfg.r_max, alpha=lambda: cfg.alpha,
        orm_advantages=lambda: compute_advantages(batch, episodes, AlgoConfig(),
                                                  run.reward_fn.part_weights)))
    metrics = trainer.apply(policy_steps, batch.replace(advantages=adv),
                            PolicySteps(run.actor, max_len=cfg.max_new_tokens))
    metrics["sampled_rkl"] = sampled_rkl(logp, teacher_logp, batch.loss_mask)
    return metrics


def run_opd(run: OPDRun, engine: Engine) -> list[dict[str, float]]:
    """Run ``run``'s steps with ``engine`` sampling for the student (synced after every
    step); returns the evaluations made."""
    cfg, tokenizer, seed = run.cfg, run.tokenizer, run.seed
    evals = []
    run.reporter.start(f"on-policy distillation ({cfg.loss})", cfg.steps, run.start_step)
    for step in range(run.start_step, cfg.steps):
        seek_step(run.tasks, step, cfg.prompts_per_step)
        problems = asked(run.tasks.sample(cfg.prompts_per_step,
                                          random.Random(f"{seed}:opd:{step}")), run.variants)
        sampling = cfg.params(stop_tokens(tokenizer), step_seed(seed, step))
        episodes = rollout(engine, tokenizer, problems, run.reward_fn, sampling, cfg.group_size)
        metrics = rollout_metrics(episodes, run.accuracy_part, run.features)
        keep = [j for j, e in enumerate(episodes) if e.segments[0].num_trainable]
        if keep:
            samples = Samples([episodes[j] for j in keep],
                              [problems[j // cfg.group_size] for j in keep])
            metrics |= distill_update(run, samples)
            engine.update_weights(run.trainer.named_weights(), step + 1)
        if run.eval_due(step):
            metrics |= run.record_eval(step, run.evaluate(engine, step), evals)
        run.finish_step(step, metrics)
    run.reporter.finish()
    return evals


def opd_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None, evals: dict):
    """The ``opd`` stage from ``opd.teachers`` (or the student itself, with
    ``opd.self_distill``); returns the trained model with whole weights."""
    cfg = parts.cfg
    trainer = Trainer(model, cfg.opd.optim, cfg.opd.steps, cfg.trainer,
                      addons=parts.trainer_addons(model))
    start = parts.resume(ckpt, trainer)
    engine.update_weights(trainer.named_weights(), start)
    with cluster_session(cfg):
        run = parts.loop_run(OPDRun, trainer, tokenizer, start, evals, cfg=cfg.opd,
                             actor=cfg.actor,
                             teachers=teachers(cfg, tokenizer, trainer.model))
        made = run_opd(run, engine)
    parts.keep_final_eval("opd", made, cfg.opd.steps, evals)
    return trainer.export_model()
