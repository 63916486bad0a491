"""The RL stage (GRPO by default): its trainer, critic and engines placed, its ``RLRun``
built, and the one RL loop (``sampling_loop.rl_loop``) run on episodes sampled in each step
(``sync_source``: ``rollout.SyncEpisodes``) or by rollout threads (``async_source``:
``rollout.AsyncEpisodes``); ``run_rl`` and ``run_async_rl`` run an ``RLRun`` built by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from posttrain.algos import entry
from posttrain.engines import Engine
from posttrain.hooks import hooked
from posttrain.recipes.build import RunParts
from posttrain.recipes.placement import (
    cluster_session,
    critic_trainer,
    policy_trainer,
    reference_model,
    rollout_engines,
)
from posttrain.recipes.run_dir import PROMPT_BUDGETS, RM_REFERENCE_SCORES
from posttrain.recipes.sampling_loop import RLRun, rl_loop, sync_weights
from posttrain.recipes.win_rate import WinRateMonitor
from posttrain.rollout import (
    AsyncEpisodes,
    ExternalAgentRollout,
    GreedyBaseline,
    SyncEpisodes,
    rollout,
)
from posttrain.rollout.dispatch import GroupSource
from posttrain.rollout.evaluation import eval_episodes
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.rollout.rank_shared import shared_engine
from posttrain.types import Episode


def sync_source(run: RLRun, engine: Engine, rollout_fn: Callable[..., list[Episode]] = rollout,
                train_rollout_fn: Callable[..., list[Episode]] | None = None) -> SyncEpisodes:
    """Where a synchronous run's steps take their episodes: each step samples its own with
    ``train_rollout_fn`` (null: ``rollout_fn``, which evaluations play: ``rollout``, an
    ``AgentRollout``, ...) on ``engine``."""
    played = train_rollout_fn or rollout_fn
    if entry("advantage", run.algo.adv_estimator).takes("baseline_rewards"):
        played = GreedyBaseline(played)  # remax: each prompt's greedy decode too
    return SyncEpisodes(engine, run.rollout_plan(), played, rollout_fn)


def async_source(run: RLRun, engine: Engine | Sequence[Engine], groups: GroupSource | None = None,
                 agent: ExternalAgentRollout | None = None,
                 eval_rollout_fn: Callable[..., list[Episode]] | None = None) -> AsyncEpisodes:
    """Where an asynchronous run's steps take their episodes: one rollout thread per engine
    generating continuously (``cfg.async_``): single-turn samples, or sessions of the external
    ``agent``, of ``run.tasks`` in the synchronous run's order, or of any ``groups`` source
    (``TaskMixer.groups`` mixes task families by ratio). Evaluation plays ``eval_rollout_fn``
    (the run's; a wrapper's ``finish_group`` also finishes the step's groups)."""
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    return AsyncEpisodes(engines, run.rollout_plan(), run.start_step, groups, agent,
                         eval_rollout_fn)


def run_rl(run: RLRun, engine: Engine, rollout_fn: Callable[..., list[Episode]] = rollout,
           train_rollout_fn: Callable[..., list[Episode]] | None = None
           ) -> list[dict[str, float]]:
    """``run``'s steps, synchronous (``sync_source``); returns the evaluations made."""
    return rl_loop(run, sync_source(run, engine, rollout_fn, train_rollout_fn))


def run_async_rl(run: RLRun, engine: Engine | Sequence[Engine], groups: GroupSource | None = None,
                 agent: ExternalAgentRollout | None = None,
                 eval_rollout_fn: Callable[..., list[Episode]] | None = None
                 ) -> list[dict[str, float]]:
    """``run``'s steps, asynchronous (``async_source``); returns the evaluations made."""
    return rl_loop(run, async_source(run, engine, groups, agent, eval_rollout_fn))


def win_rate_monitor(parts: RunParts, run: RLRun, engine: Engine,
                     resumed: bool) -> WinRateMonitor | None:
    """``rl.rm_win_rate_monitor``'s monitor, its reference scores those of the stage's
    starting policy (on ``engine``, before the first update) or, resumed, read back."""
    cfg = parts.cfg.rl.rm_win_rate_monitor
    if cfg is None:
        return None
    monitor = WinRateMonitor(cfg.part_of(parts.cfg), cfg.warn_above,
                             parts.out / RM_REFERENCE_SCORES, run.reporter.message)
    if monitor.reference is None:
        if resumed:
            raise RuntimeError(f"rl.rm_win_rate_monitor: {parts.out / RM_REFERENCE_SCORES} is "
                               "missing; the monitor must be on from the RL stage's start")
        monitor.set_reference(eval_episodes(engine, run.tokenizer, run.eval_tasks, run.reward_fn,
                                            run.eval_cfg, run.seed, parts.rollout_fn))
    return monitor


def training_rollout(rollout_fn: Callable[..., list[Episode]], cfg, run: RLRun
                     ) -> Callable[..., list[Episode]]:
    """What a synchronous RL step plays: ``rollout_fn`` through the features'
    ``wrap_training_rollout`` hooks."""
    for wrap in hooked("wrap_training_rollout"):
        rollout_fn = wrap(rollout_fn, cfg, run)
    return rollout_fn


def rl_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None, evals: dict):
    """The ``rl`` stage (sync or async, local or on Ray); returns the trained model with
    whole weights."""
    cfg = parts.cfg
    start_dir = parts.start_dir("rl")
    ref = reference_model(cfg, model, start_dir, ckpt is not None) if cfg.algo.kl.coef > 0 else None
    with cluster_session(cfg):
        trainer = policy_trainer(cfg, model, cfg.rl.optim, cfg.rl.steps, ref,
                                 parts.trainer_addons(model))
        critic = critic_trainer(cfg, start_dir, ckpt)
        start = parts.resume(ckpt, trainer, critic)
        sync = cfg.rl.sync  # its tolerance resolved at trainer.precision (config.schema)
        run = parts.loop_run(RLRun, trainer, tokenizer, start, evals, cfg=cfg.rl, algo=cfg.algo,
                             actor=cfg.actor, critic=critic, critic_cfg=cfg.critic,
                             shaping=cfg.reward.shaping, prompt_budgets=PromptBudgets(
                                 cfg.reward.accuracy_part, parts.out / PROMPT_BUDGETS),
                             shaping_inputs=parts.shaping_inputs,
                             sleep_engines=cfg.engine.sleep,
                             after_update=[a for f in hooked("after_update")
                                           if (a := f(parts, tokenizer)) is not None])
        with rollout_engines(cfg, engine, start_dir, tokenizer) as engines:
            for e in engines:
                sync_weights(trainer, shared_engine(e), start, cfg=sync)
            monitor = win_rate_monitor(parts, run, engines[0], resumed=ckpt is not None)
            watches = [watch(parts, run, engines[0], evals) for watch in hooked("eval_watch")]
            run.watches = [w for w in (monitor, *watches) if w]
            external = parts.rollout_fn if cfg.agent.plays_externally else None
            try:
                if cfg.rl.mode == "async":
                    source = async_source(run, engines, agent=external,
                                          eval_rollout_fn=parts.rollout_fn)
                else:
                    source = sync_source(run, engines[0], parts.rollout_fn,
                                         training_rollout(parts.rollout_fn, cfg, run))
                made = rl_loop(run, source)
            finally:  # an external agent's server (a later stage's use starts a new one)
                if hasattr(parts.rollout_fn, "close"):
                    parts.rollout_fn.close()
        parts.keep_final_eval("rl", made, cfg.rl.steps, evals)
        return trainer.export_model()  # (a trainer actor: before the cluster session ends)
