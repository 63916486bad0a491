"""RL (GRPO by default), one loop for sync and async: episodes -> update -> verified weight
sync to the engines -> periodic eval -> log and checkpoint (``rl_loop``); where the episodes
come from is the only difference (``rollout.SyncEpisodes`` or ``rollout.AsyncEpisodes``).

Every weight sync carries a version and a checksum of the trainer's weights; it must finish
within a timeout; the engine must then report the same checksum; and trainer and engine score
the same probe sequences, their mean |log-prob difference| logged and bounded. Any failure is
a ``WeightSyncError`` naming the versions, never a silent stall or a drifting run.

Step ``k`` draws its prompts and sampling seed from ``(seed, k)`` alone, so the step number is
the data cursor and a resumed run repeats the uninterrupted one exactly; at ``max_staleness:
0`` the async run samples the synchronous run's tokens (tests/integration/test_async_rl.py).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from posttrain.algos import entry
from posttrain.config import SyncConfig
from posttrain.engines import Engine, WeightsDigest
from posttrain.recipes.build import RunParts
from posttrain.recipes.placement import (
    cluster_session,
    critic_trainer,
    policy_trainer,
    reference_model,
    rollout_engines,
)
from posttrain.recipes.run_dir import PROMPT_BUDGETS
from posttrain.recipes.sampling_loop import RLRun
from posttrain.recipes.skills import skill_evolution
from posttrain.rollout import (
    AsyncEpisodes,
    ExternalAgentRollout,
    GreedyBaseline,
    SyncEpisodes,
    rollout,
    rollout_metrics,
)
from posttrain.rollout.dispatch import GroupSource
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.train import PolicyTrainer
from posttrain.types import Batch, Episode, Segment, write_episodes
from posttrain.types.errors import MismatchError, WeightSyncError


def check_mismatch(value: float, tolerance: float) -> None:
    """``value`` is the mean |trainer - engine| log-prob of the sampled tokens (the update's
    ``mismatch`` metric); above ``tolerance`` the engine is not sampling from the policy."""
    if value > tolerance:
        raise MismatchError(
            f"train/inference log-prob mismatch {value:.4g} > rl.mismatch_tolerance={tolerance}"
        )


@dataclass(frozen=True)
class SyncReport:
    version: int
    checksum: str
    mismatch: float  # mean |trainer - engine| log-prob over the probes' tokens (0 without)
    seconds: float

    def metrics(self) -> dict[str, float]:
        return {"sync/mismatch": self.mismatch, "sync/seconds": self.seconds}


def sync_weights(trainer: PolicyTrainer, engine: Engine, version: int,
                 probes: Sequence[Sequence[int]] = (), cfg: SyncConfig = SyncConfig()
                 ) -> SyncReport:
    """Send the trainer's weights to ``engine`` as ``version`` and verify them."""
    start = time.perf_counter()
    sent = WeightsDigest()  # the weights stream to the engine one at a time, fingerprinted
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(engine.update_weights, sent.passing(trainer.named_weights()),
                    version).result(timeout=cfg.timeout_s)
    except concurrent.futures.TimeoutError:
        raise WeightSyncError(f"weight sync to version {version} did not finish within "
                              f"{cfg.timeout_s:g} s (engine still at version "
                              f"{engine.version})") from None
    finally:
        pool.shutdown(wait=False)
    held, checksum = engine.weights_checksum(), sent.hexdigest()
    if held != checksum:
        raise WeightSyncError(f"weight sync to version {version}: the engine holds weights "
                              f"with checksum {held}, the trainer sent {checksum}")
    mismatch = probe_mismatch(trainer, engine, probes) if probes else 0.0
    if mismatch > cfg.limit():
        raise WeightSyncError(
            f"after the sync to version {version} (engine version {engine.version}) the engine's "
            f"log-probs differ from the trainer's by {mismatch:.3g} > rl.sync.tolerance "
            f"{cfg.limit()} (a mean over rl.sync.probes sequences; the default follows "
            "trainer.precision)")
    return SyncReport(version, checksum, mismatch, time.perf_counter() - start)


def probe_mismatch(trainer: PolicyTrainer, engine: Engine,
                   probes: Sequence[Sequence[int]]) -> float:
    """Mean |trainer - engine| log-prob over every token of ``probes`` but the first. An
    engine that records its routing gives it to the probes, so a trainer that replays routing
    (``trainer.routing_replay``) is compared through the same experts, as its update is: in
    bf16, free routers pick other experts on near ties, a gap no update sees."""
    theirs, routing = engine.score_routed(probes) if getattr(engine, "record_routing", False) \
        else (engine.score(probes), None)
    segments = [Segment(list(p), [0] + [1] * (len(p) - 1), [0.0] * len(p), [-1] * len(p),
                        routing=None if routing is None else routing[i])
                for i, p in enumerate(probes)]
    batch = Batch.from_episodes([Episode([s]) for s in segments], pad_token_id=0)
    ours = trainer.compute_logprobs(batch)
    total, count = 0.0, 0
    for i, p in enumerate(probes):
        for t in range(1, len(p)):
            total += abs(float(ours[i, t]) - theirs[i][t])
            count += 1
    return total / max(count, 1)


def rl_loop(run: RLRun, source: SyncEpisodes | AsyncEpisodes) -> list[dict[str, float]]:
    """The RL loop, sync or async: each step takes its episodes from ``source``, updates the
    policy, syncs the engines (version, checksum, probes), evaluates when due, logs and
    checkpoints. Returns the evaluations made."""
    cfg, evals = run.cfg, []
    update = run.policy_update()
    run.reporter.start(source.title, cfg.steps, run.start_step)
    with source:
        for step in range(run.start_step, cfg.steps):
            started = time.perf_counter()
            episodes, sampled, counts = source.take(step)
            metrics = rollout_metrics(sampled, run.accuracy_part) | counts
            if episodes:
                if run.sleep_engines:  # the update gets the engines' memory; the sync wakes them
                    source.call(lambda e: e.sleep())
                metrics |= update(episodes, *source.staleness())
                if source.on_policy:
                    check_mismatch(metrics["mismatch"], cfg.mismatch_tolerance)
                probes = [s.token_ids for e in episodes for s in e.segments][: cfg.sync.probes]
                reports = source.call(lambda e: sync_weights(
                    run.trainer, e, source.version + 1, probes, cfg.sync))
                metrics |= {k: max(r.metrics()[k] for r in reports) for k in reports[0].metrics()}
            if run.evolve is not None:
                metrics |= run.evolve(step, sampled)
            if cfg.save_episodes:  # after the update: some carry its token stats
                for episode in sampled:  # the viewer's step filter and group view
                    episode.meta["step"] = step + 1
                write_episodes(run.reporter.path.parent / "episodes.jsonl", sampled,
                               append=True)
            source.release(len(episodes) // cfg.group_size)
            seconds = time.perf_counter() - started  # sampling (or waiting), update, sync
            tokens = sum(s.num_trainable for e in sampled for s in e.segments)
            metrics |= {"perf/step_s": seconds, "perf/sampled_tokens_per_s": tokens / seconds}
            if run.eval_due(step):
                result = source.first(lambda e: run.held_out(e, step, source.rollout_fn))
                metrics |= run.record_eval(step, result, evals)
            run.finish_step(step, metrics | source.stats())
    run.reporter.finish()
    return evals


def run_rl(run: RLRun, engine: Engine, efforts: Sequence[int] | None = None,
           rollout_fn: Callable[..., list[Episode]] = rollout) -> list[dict[str, float]]:
    """``run``'s steps, each sampling its own episodes with ``rollout_fn`` (``rollout``, an
    ``AgentRollout``, ...) on ``engine``; with ``efforts`` every prompt is asked at each level.
    Returns the evaluations made."""
    if entry("advantage", run.algo.adv_estimator).takes("baseline_rewards"):
        rollout_fn = GreedyBaseline(rollout_fn)  # remax: each prompt's greedy decode too
    return rl_loop(run, SyncEpisodes(engine, run.rollout_plan(), efforts, rollout_fn))


def run_async_rl(run: RLRun, engine: Engine | Sequence[Engine],
                 groups: GroupSource | None = None,
                 agent: ExternalAgentRollout | None = None) -> list[dict[str, float]]:
    """``run``'s steps with one rollout thread per engine generating continuously
    (``cfg.async_``): single-turn samples, or sessions of the external ``agent``, of
    ``run.tasks`` in the synchronous run's order, or of any ``groups`` source
    (``TaskMixer.groups`` mixes task families by ratio). Returns the evaluations made."""
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    return rl_loop(run, AsyncEpisodes(engines, run.rollout_plan(), run.start_step, groups,
                                      agent))


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
        sync = cfg.rl.sync  # its tolerance resolved at trainer.precision (config.schema)
        run = parts.loop_run(RLRun, trainer, tokenizer, start, evals, cfg=cfg.rl, algo=cfg.algo,
                             actor=cfg.actor, critic=critic, critic_cfg=cfg.critic,
                             shaping=cfg.reward.shaping, prompt_budgets=PromptBudgets(
                                 cfg.reward.accuracy_part, parts.out / PROMPT_BUDGETS),
                             sleep_engines=cfg.engine.sleep,
                             evolve=skill_evolution(cfg, parts.skills, tokenizer))
        with rollout_engines(cfg, engine, start_dir, tokenizer) as engines:
            for e in engines:
                sync_weights(trainer, e, start, cfg=sync)
            external = parts.rollout_fn if cfg.agent.plays_externally else None
            try:
                if cfg.rl.mode == "async":
                    made = run_async_rl(run, engines, agent=external)
                else:
                    made = run_rl(run, engines[0], cfg.task.efforts, parts.rollout_fn)
            finally:
                if external is not None:
                    external.close()  # its server (a later stage's use starts a new one)
        parts.keep_final_eval("rl", made, cfg.rl.steps, evals)
        return trainer.export_model()  # (a trainer actor: before the cluster session ends)
