"""Synchronous RL (GRPO by default): prompts -> G completions each -> rewards -> advantages ->
update -> weight sync to the engine -> periodic eval.

Step ``k`` draws its prompts and sampling seed from ``(seed, k)`` alone, so the step number is
the data cursor and a resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from posttrain.engines import Engine
from posttrain.envs import EffortTask
from posttrain.recipes.build import RunParts
from posttrain.recipes.placement import (
    cluster_session,
    critic_trainer,
    policy_trainer,
    reference_model,
    rollout_engines,
)
from posttrain.recipes.rl_async import run_async_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.recipes.weight_sync import sync_weights
from posttrain.rollout import informative, rollout, rollout_metrics, shape_rewards
from posttrain.types import Episode, write_episodes
from posttrain.types.errors import MismatchError
from posttrain.types.sampling import step_seed


def check_mismatch(value: float, tolerance: float) -> None:
    """``value`` is the mean |trainer - engine| log-prob of the sampled tokens (the update's
    ``mismatch`` metric); above ``tolerance`` the engine is not sampling from the policy."""
    if value > tolerance:
        raise MismatchError(
            f"train/inference log-prob mismatch {value:.4g} > rl.mismatch_tolerance={tolerance}"
        )


def run_rl(
    run: RLRun,
    engine: Engine,
    efforts: Sequence[int] | None = None,
    rollout_fn: Callable[..., list[Episode]] = rollout,
) -> list[dict[str, float]]:
    """Run ``run``'s steps synchronously; returns the evaluations made. With ``efforts`` every
    prompt is asked at each level, one group per (prompt, effort); ``rollout_fn`` (``rollout``
    or an ``AgentRollout``) plays the episodes."""
    cfg, algo, tokenizer, seed = run.cfg, run.algo, run.tokenizer, run.seed
    truncating = cfg.top_p < 1 or cfg.top_k > 0
    update = run.policy_update()
    groups_per_prompt = len(efforts) if efforts else 1
    target_groups = cfg.prompts_per_step * groups_per_prompt
    evals = []
    run.reporter.start("RL", cfg.steps)
    for step in range(run.start_step, cfg.steps):

        def sample(n: int, round_: int) -> list[Episode]:
            problems = run.tasks.sample(n, random.Random(f"{seed}:rl:{step}:{round_}"))
            if efforts:  # one group per (prompt, effort)
                problems = [EffortTask(p, b) for p in problems for b in efforts]
            sampling = cfg.params((tokenizer.eos_token_id,), step_seed(seed, step) + round_)
            episodes = rollout_fn(engine, tokenizer, problems, run.reward_fn, sampling,
                                  cfg.group_size, group_prefix=f"{round_}-")
            return shape_rewards(episodes, run.shaping, step, efforts)

        first = sample(cfg.prompts_per_step, 0)
        if cfg.save_episodes:
            write_episodes(run.reporter.path.parent / "episodes.jsonl", first, append=True)
        metrics = rollout_metrics(first, run.accuracy_part)
        episodes = first
        if algo.dynamic_sampling.enabled:
            episodes, extra = informative(first), 0
            if algo.dynamic_sampling.mode == "resample":
                for round_ in range(1, algo.dynamic_sampling.max_rounds + 1):
                    missing = target_groups - len(episodes) // cfg.group_size
                    if missing <= 0:
                        break
                    more = sample(math.ceil(missing / groups_per_prompt), round_)
                    extra += len(more)
                    episodes += informative(more)
                episodes = episodes[: target_groups * cfg.group_size]
            metrics["extra_generations"] = float(extra)
            metrics["kept_groups"] = float(len(episodes) // cfg.group_size)
        if episodes:
            metrics |= update(episodes)
            if truncating:  # behaviour log-probs are of the truncated distribution
                del metrics["mismatch"]
            else:
                check_mismatch(metrics["mismatch"], cfg.mismatch_tolerance)
            probes = [s.token_ids for e in episodes for s in e.segments][: cfg.sync.probes]
            metrics |= sync_weights(run.trainer, engine, step + 1, probes, cfg.sync).metrics()
        if run.eval_due(step):
            metrics |= run.record_eval(step, run.held_out(engine, rollout_fn), evals)
        run.finish_step(step, metrics)
    run.reporter.finish()
    return evals


def rl_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None,
             evals: dict):
    """The ``rl`` stage (sync or async, local or on Ray); returns the trained model with
    whole weights."""
    cfg = parts.cfg
    start_dir = parts.start_dir("rl")
    ref = reference_model(cfg, model, start_dir, ckpt is not None) if cfg.algo.kl.coef > 0 \
        else None
    with cluster_session(cfg):
        trainer = policy_trainer(cfg, model, cfg.rl.optim, cfg.rl.steps, ref)
        critic = critic_trainer(cfg, start_dir, ckpt)
        start = parts.resume(ckpt, trainer, critic)
        run = parts.loop_run(RLRun, trainer, tokenizer, start, evals, cfg=cfg.rl, algo=cfg.algo,
                             actor=cfg.actor, critic=critic, critic_cfg=cfg.critic,
                             shaping=cfg.reward.shaping)
        with rollout_engines(cfg, engine, start_dir, tokenizer) as engines:
            for e in engines:
                sync_weights(trainer, e, start, cfg=cfg.rl.sync)
            if cfg.rl.mode == "async":
                run_async_rl(run, engines)
            else:
                run_rl(run, engines[0], cfg.task.efforts, parts.rollout_fn)
        return trainer.export_model()
