"""RL (GRPO by default), one loop for sync and async: episodes -> update -> weight sync to
the engines -> periodic eval -> log and checkpoint (``rl_loop``); where the episodes come from
is the only difference (``rollout.step_sources``).

Step ``k`` draws its prompts and sampling seed from ``(seed, k)`` alone, so the step number is
the data cursor and a resumed run repeats the uninterrupted one exactly; at ``max_staleness:
0`` the async run samples the synchronous run's tokens (tests/integration/test_async_rl.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from posttrain.engines import Engine
from posttrain.recipes.build import RunParts
from posttrain.recipes.placement import (
    cluster_session,
    critic_trainer,
    policy_trainer,
    reference_model,
    rollout_engines,
)
from posttrain.recipes.sampling_loop import RLRun
from posttrain.recipes.weight_sync import sync_weights
from posttrain.rollout import rollout, rollout_metrics
from posttrain.rollout.dispatch import GroupSource
from posttrain.rollout.step_sources import AsyncEpisodes, SyncEpisodes
from posttrain.types import Episode, write_episodes
from posttrain.types.errors import MismatchError


def check_mismatch(value: float, tolerance: float) -> None:
    """``value`` is the mean |trainer - engine| log-prob of the sampled tokens (the update's
    ``mismatch`` metric); above ``tolerance`` the engine is not sampling from the policy."""
    if value > tolerance:
        raise MismatchError(
            f"train/inference log-prob mismatch {value:.4g} > rl.mismatch_tolerance={tolerance}"
        )


def rl_loop(run: RLRun, source: SyncEpisodes | AsyncEpisodes) -> list[dict[str, float]]:
    """The RL loop, sync or async: each step takes its episodes from ``source``, updates the
    policy, syncs the engines (version, checksum, probes), evaluates when due, logs and
    checkpoints. Returns the evaluations made."""
    cfg, evals = run.cfg, []
    update = run.policy_update()
    truncating = cfg.top_p < 1 or cfg.top_k > 0
    run.reporter.start(source.title, cfg.steps)
    with source:
        for step in range(run.start_step, cfg.steps):
            episodes, sampled, counts = source.take(step)
            if cfg.save_episodes:
                write_episodes(run.reporter.path.parent / "episodes.jsonl", sampled,
                               append=True)
            metrics = rollout_metrics(sampled, run.accuracy_part) | counts
            if episodes:
                metrics |= update(episodes, *source.staleness())
                if source.on_policy and truncating:  # behaviour log-probs: truncated
                    del metrics["mismatch"]
                elif source.on_policy:
                    check_mismatch(metrics["mismatch"], cfg.mismatch_tolerance)
                probes = [s.token_ids for e in episodes for s in e.segments][: cfg.sync.probes]
                reports = source.call(lambda e: sync_weights(
                    run.trainer, e, source.version + 1, probes, cfg.sync))
                metrics |= {k: max(r.metrics()[k] for r in reports) for k in reports[0].metrics()}
            source.release(len(episodes) // cfg.group_size)
            if run.eval_due(step):
                result = source.first(lambda e: run.held_out(e, source.rollout_fn))
                metrics |= run.record_eval(step, result, evals)
            run.finish_step(step, metrics | source.stats())
    run.reporter.finish()
    return evals


def run_rl(run: RLRun, engine: Engine, efforts: Sequence[int] | None = None,
           rollout_fn: Callable[..., list[Episode]] = rollout) -> list[dict[str, float]]:
    """``run``'s steps, each sampling its own episodes with ``rollout_fn`` (``rollout``, an
    ``AgentRollout``, ...) on ``engine``; with ``efforts`` every prompt is asked at each level.
    Returns the evaluations made."""
    return rl_loop(run, SyncEpisodes(engine, run.tokenizer, run.tasks, run.reward_fn, run.cfg,
                                     run.algo.dynamic_sampling, run.shaping, run.seed, efforts,
                                     rollout_fn))


def run_async_rl(run: RLRun, engine: Engine | Sequence[Engine],
                 groups: GroupSource | None = None) -> list[dict[str, float]]:
    """``run``'s steps with one rollout thread per engine generating continuously
    (``cfg.async_``); single-turn tasks: ``run.tasks`` in the synchronous run's order, or any
    ``groups`` source (``TaskMixer.groups`` mixes task families by ratio). Returns the
    evaluations made."""
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    return rl_loop(run, AsyncEpisodes(engines, run.tokenizer, run.tasks, run.reward_fn,
                                      run.cfg, run.algo.dynamic_sampling, run.shaping, run.seed,
                                      run.start_step, groups))


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
