"""The training loops' step machinery, and the RL loop on it.

``LoopRun``: what a sampling training loop (RL, on-policy distillation) needs besides its own
settings — the trainer, the tasks and their reward, held-out evaluation, where results go and
where to start; each loop's run adds its settings as keyword-only fields, among them ``cfg``
with ``steps`` and ``eval_every`` (``RLRun`` here, ``OPDRun`` beside on-policy distillation).
``Checkpointer``: what every stage runs after a step (counters, checkpoints).

``rl_loop``: one loop for sync and async RL: episodes -> update -> verified weight sync to the
engines -> periodic eval -> log and checkpoint; where the episodes come from is the only
difference (``rollout.SyncEpisodes`` or ``rollout.AsyncEpisodes``). Every weight sync carries
a version and a checksum of the trainer's weights; it must finish within a timeout; the engine
must then report the same checksum; and trainer and engine score the same probe sequences,
their mean |log-prob difference| logged and bounded. Any failure is a ``WeightSyncError``
naming the versions, never a silent stall or a drifting run. Step ``k`` draws its prompts and
sampling seed from ``(seed, k)`` alone, so the step number is the data cursor and a resumed run
repeats the uninterrupted one exactly; at ``max_staleness: 0`` the async run samples the
synchronous run's tokens (tests/integration/test_async_rl.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    EvalConfig,
    RLConfig,
    ShapingRule,
    SyncConfig,
)
from posttrain.config.sections.rl import SYNC_TOLERANCE
from posttrain.engines import Engine, send_verified
from posttrain.envs import Task
from posttrain.hooks import hooked
from posttrain.models import stop_tokens
from posttrain.recipes.run_dir import record_sizes
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.rollout import AsyncEpisodes, SyncEpisodes, rollout, rollout_metrics
from posttrain.rollout.evaluation import evaluate
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.rollout.rank_shared import shared_source
from posttrain.rollout.scoring import set_aside
from posttrain.rollout.single_turn import RolloutPlan
from posttrain.train import PolicyTrainer, Trainer, save_checkpoint
from posttrain.train.rl_update import PolicySteps, PolicyUpdate
from posttrain.types import Batch, Episode, Segment, write_episodes
from posttrain.types.errors import MismatchError, WeightSyncError


def due(every: int, step: int, steps: int) -> bool:
    """Whether what runs every ``every`` steps (0: never) follows step ``step`` (0-based) of
    ``steps``; it also follows the last step."""
    return bool(every) and ((step + 1) % every == 0 or step + 1 == steps)


@dataclass
class Checkpointer:
    """``on_step_end`` of ``stage`` in the run ``parts`` (a ``RunParts``): the stage's
    ``parts.counters`` (the trainer's optimiser steps and micro-batches, the checkpoints
    written), and a checkpoint every ``checkpoint_every`` steps. Its cursor holds the stage, its
    step, the evaluations and counters so far, the records' lengths and each process's seconds."""

    parts: Any
    trainer: PolicyTrainer
    tokenizer: Any
    stage: str
    evals: dict
    critic: Trainer | None = None

    def __call__(self, step: int) -> None:
        parts, cfg = self.parts, self.parts.cfg
        counts = parts.counters.setdefault(self.stage, {"checkpoints": 0})
        counts |= self.trainer.apply(Trainer.counters)
        if not cfg.checkpoint_every or step % cfg.checkpoint_every:
            return
        counts["checkpoints"] += 1
        cursor = {"stage": self.stage, "step": step, "evals": self.evals,
                  "counters": parts.counters, "records": record_sizes(parts.out),
                  "process_seconds": parts.process_seconds()}
        for entries in hooked("checkpoint"):  # the features' own
            cursor |= entries(parts)
        save_checkpoint(parts.ckpt_dir, self.trainer, self.tokenizer, cursor,
                        f"{self.stage}-{step:06d}", self.critic, write=parts.rank == 0,
                        keep_last=cfg.keep_last, sharded=cfg.checkpoint_format == "sharded")


@dataclass
class LoopRun:
    """Steps ``start_step .. cfg.steps`` on ``tasks`` (each drawn prompt asked in every one of
    ``variants``, if any: ``RunTasks.variants``), logged as ``STAGE``; ``on_step_end(step)``
    runs after each step (checkpoints)."""

    STAGE: ClassVar[str]
    trainer: PolicyTrainer
    tokenizer: Any
    tasks: Any
    eval_tasks: Sequence[Task]
    reward_fn: RewardFunction
    eval_cfg: EvalConfig
    accuracy_part: str
    reporter: Reporter
    seed: int = 0
    start_step: int = 0
    on_step_end: Callable[[int], None] | None = None
    cfg: Any = field(kw_only=True)
    watches: list[Callable[[Sequence[Episode]], dict[str, float]]] = field(
        default_factory=list, kw_only=True)
    features: Mapping[str, Any] = field(default_factory=dict, kw_only=True)  # their settings
    variants: Sequence[Callable[[Task], Task]] = field(default=(), kw_only=True)

    def eval_due(self, step: int) -> bool:
        """Whether held-out evaluation follows step ``step`` (0-based)."""
        return due(self.cfg.eval_every, step, self.cfg.steps)

    def evaluate(self, engine: Engine, step: int, rollout_fn: Callable[..., list] = rollout
                 ) -> dict[str, float]:
        """Held-out evaluation of the weights ``engine`` holds after step ``step`` (0-based)
        (with each of ``watches``' metrics of its episodes); its samples go to the trackers
        as ``<stage>_step_<n>``."""
        episodes, metrics = evaluate(engine, self.tokenizer, self.eval_tasks, self.reward_fn,
                                      self.eval_cfg, self.accuracy_part, self.seed, rollout_fn,
                                      self.features)
        self.reporter.samples(f"{self.STAGE}_step_{step + 1}", episodes, self.tokenizer)
        for watch in self.watches:
            metrics |= watch(episodes)
        return metrics

    @staticmethod
    def record_eval(step: int, result: dict[str, float], evals: list[dict]) -> dict[str, float]:
        """Append ``result`` to ``evals`` as step ``step``'s; returns its ``eval/`` metrics."""
        evals.append({"step": step + 1, **result})
        return {f"eval/{k}": v for k, v in result.items()}

    def finish_step(self, step: int, metrics: dict[str, float]) -> None:
        """Log step ``step``'s metrics, advance the progress bar, run ``on_step_end``."""
        self.reporter.log(self.STAGE, step + 1, metrics)
        self.reporter.advance(step + 1,
                              f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.3f}")
        if self.on_step_end is not None:
            self.on_step_end(step + 1)


@dataclass(kw_only=True)
class RLRun(LoopRun):
    """RL with ``cfg``, ``algo`` and ``actor``. With a ``critic`` (PPO), its values feed GAE
    and it trains on the returns alongside the actor; ``shaping`` rules reshape rewards before
    groups are filtered and scored (``prompt_budgets``: the per-prompt budgets of rules with
    ``budget: auto``; ``shaping_inputs``: what the features offer them,
    ``RunTasks.shaping_inputs``). ``sleep_engines`` (``engine.sleep``): the engines free their
    memory for each update; the weight sync after it wakes them. Each of ``after_update(step,
    episodes)`` runs after each update with the step's sampled task episodes (the features'
    ``after_update`` hooks); its metrics are logged with the step's."""

    STAGE: ClassVar[str] = "rl"
    cfg: RLConfig
    algo: AlgoConfig
    actor: ActorConfig
    critic: Trainer | None = None
    critic_cfg: CriticConfig | None = None
    shaping: Sequence[ShapingRule] = ()
    prompt_budgets: PromptBudgets | None = None
    shaping_inputs: Mapping[str, Any] = field(default_factory=dict)
    sleep_engines: bool = False
    after_update: Sequence[Callable[[int, Sequence[Episode]], dict[str, float]]] = ()

    def rollout_plan(self) -> RolloutPlan:
        """Where the loop's episodes come from and how they are scored."""
        return RolloutPlan(self.tokenizer, self.tasks, self.reward_fn, self.cfg,
                           self.cfg.params(stop_tokens(self.tokenizer)),
                           self.algo.dynamic_sampling, self.shaping, self.seed, self.prompt_budgets,
                           self.shaping_inputs, self.variants)

    def policy_update(self) -> PolicyUpdate:
        return PolicyUpdate(
            trainer=self.trainer, algo=self.algo,
            steps=PolicySteps.of(self.cfg, self.algo, self.actor),
            pad_token_id=self.tokenizer.pad_token_id, part_weights=self.reward_fn.part_weights,
            critic=self.critic, critic_cfg=self.critic_cfg,
            token_stats=self.cfg.token_stats if self.cfg.save_episodes else 0,
            features=self.features)


def check_mismatch(value: float, tolerance: float) -> None:
    """``value`` is the mean |trainer - engine| log-prob of the sampled tokens (the update's
    ``mismatch`` metric); above ``tolerance`` the engine is not sampling from the policy."""
    if value > tolerance:
        raise MismatchError(f"train/inference log-prob mismatch {value:.4g} > "
                            f"rl.mismatch_tolerance={tolerance}")


@dataclass(frozen=True)
class SyncReport:
    version: int
    checksum: str
    mismatch: float  # mean |trainer - engine| log-prob over the probes' tokens (0 without)
    seconds: float
    nbytes: int = 0  # the bytes sent: whole weights, or an engine-served adapter alone

    def metrics(self) -> dict[str, float]:
        return {"sync/mismatch": self.mismatch, "sync/seconds": self.seconds,
                "sync/mib": self.nbytes / 2**20}


def sync_weights(trainer: PolicyTrainer, engine: Engine, version: int,
                 probes: Sequence[Sequence[int]] = (), cfg: SyncConfig = SyncConfig()
                 ) -> SyncReport:
    """Send the trainer's weights to ``engine`` as ``version``, verified by checksum
    (``engines.send_verified``), then by the ``probes``' log-probs on both sides. An engine
    that serves LoRA adapters itself (``serves_adapters``) gets the trainer's adapter alone."""
    start = time.perf_counter()
    adapter = trainer.apply(Trainer.adapter) if getattr(engine, "serves_adapters", False) \
        else None
    config, weights = adapter if adapter is not None else (None, trainer.named_weights())
    sent = send_verified(engine, weights, version, cfg.timeout_s, config)
    checksum = sent.hexdigest()
    mismatch = probe_mismatch(trainer, engine, probes) if probes else 0.0
    tolerance = SYNC_TOLERANCE["fp32"] if cfg.tolerance is None else cfg.tolerance
    if mismatch > tolerance:
        raise WeightSyncError(
            f"after the sync to version {version} (engine version {engine.version}) the engine's "
            f"log-probs differ from the trainer's by {mismatch:.3g} > rl.sync.tolerance "
            f"{tolerance} (a mean over rl.sync.probes sequences; the default follows "
            "trainer.precision)")
    return SyncReport(version, checksum, mismatch, time.perf_counter() - start, sent.nbytes)


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
    gaps = [abs(float(ours[i, t]) - theirs[i][t]) for i, p in enumerate(probes)
            for t in range(1, len(p))]
    return sum(gaps, 0.0) / max(len(gaps), 1)


def rl_loop(run: RLRun, source: SyncEpisodes | AsyncEpisodes) -> list[dict[str, float]]:
    """The RL loop, sync or async: each step takes its episodes from ``source``, updates the
    policy, syncs the engines (version, checksum, probes), evaluates when due, logs and
    checkpoints. Returns the evaluations made."""
    cfg, evals = run.cfg, []
    source = shared_source(source)  # in a trainer process group: rank 0's rollouts for all
    update = run.policy_update()
    run.reporter.start(source.title, cfg.steps, run.start_step)
    with source:
        for step in range(run.start_step, cfg.steps):
            started = time.perf_counter()
            episodes, sampled, counts = source.take(step)
            metrics = rollout_metrics(sampled, run.accuracy_part, run.features) | counts
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
            for after in run.after_update:
                metrics |= after(step, [e for e in sampled if not set_aside(e)])
            if cfg.save_episodes:  # after the update: some carry its token stats
                for episode in sampled:  # the viewer's step filter and group view
                    episode.meta["step"] = step + 1
                write_episodes(run.reporter.path.parent / "episodes.jsonl", sampled, append=True)
            source.release(len(episodes) // cfg.group_size)
            seconds = time.perf_counter() - started  # sampling (or waiting), update, sync
            tokens = sum(s.num_trainable for e in sampled for s in e.segments)
            metrics |= {"perf/step_s": seconds, "perf/sampled_tokens_per_s": tokens / seconds}
            if run.eval_due(step):
                result = source.first(lambda e: run.evaluate(e, step, source.eval_rollout_fn))
                metrics |= run.record_eval(step, result, evals)
            run.finish_step(step, metrics | source.stats())
    run.reporter.finish()
    return evals
