"""Asynchronous RL: a rollout thread generates continuously (sample-level dispatch, partial
rollout) while the trainer trains on complete groups, within a staleness bound.

Group ``n`` is prompt ``n % B`` of the synchronous run's step ``n // B`` with the same per-sample
seeds, so with ``max_staleness: 0`` the async run samples exactly the synchronous run's tokens
and ends at the same parameters (tests/integration/test_async_rl.py). Step ``s`` trains on the
first ``B`` groups it can take (``RolloutBuffer``'s order); with dynamic sampling, groups
without signal are discarded and replaced until ``B`` carry signal or ``max_rounds * B`` were
discarded. Tokens older than ``max_staleness`` versions are masked out of the loss
(``stale: mask``) or their groups are discarded like uninformative ones (``stale: drop``).

The update's ``mismatch`` metric here includes the policy's lag behind the sampled tokens, so
the engine is checked by the weight-sync probes alone (``rl.sync.tolerance``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence

from posttrain.engines import Engine, row_seeds
from posttrain.envs import Task
from posttrain.recipes.sampling_loop import RLRun
from posttrain.recipes.weight_sync import sync_weights
from posttrain.rollout import informative, rollout_metrics
from posttrain.rollout.async_loop import AsyncRollout
from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher, GroupSource
from posttrain.rollout.reward_shaping import shape_rewards
from posttrain.rollout.worker import RolloutWorker
from posttrain.types import Episode, write_episodes
from posttrain.types.sampling import step_seed


def step_groups(tasks, seed: int, prompts_per_step: int, group_size: int) -> GroupSource:
    """Groups in the synchronous run's order: prompts and row seeds of its first rounds."""

    @functools.lru_cache(maxsize=4)
    def step_batch(step: int) -> tuple[list[Task], list[int]]:
        problems = tasks.sample(prompts_per_step, random.Random(f"{seed}:rl:{step}:0"))
        return problems, row_seeds(step_seed(seed, step), prompts_per_step * group_size)

    def source(group: int) -> tuple[Task, list[int]]:
        step, k = divmod(group, prompts_per_step)
        problems, seeds = step_batch(step)
        return problems[k], seeds[k * group_size : (k + 1) * group_size]

    return source


def generated(workers: Sequence[RolloutWorker]) -> int:
    return sum(w.tokens_generated for w in workers)


def fresh_enough(group: list[Episode], version: int, max_staleness: int) -> bool:
    """Every trainable token was sampled at most ``max_staleness`` versions ago."""
    return all(version - v <= max_staleness for e in group for s in e.segments
               for v, m in zip(s.versions, s.loss_mask) if m)


def collect_groups(
    loop: AsyncRollout,
    n: int,
    shape: Callable[[list[Episode]], list[Episode]],
    usable: Callable[[list[Episode]], bool],
    need_signal: bool,
    max_discards: int,
) -> tuple[list[list[Episode]], list[Episode], dict[str, float]]:
    """Take groups until ``n`` are kept or ``max_discards`` were dropped: a group is shaped,
    then dropped if not ``usable`` (stale) or, with ``need_signal``, if its rewards are all
    equal; a dropped group's capacity is released at once so a replacement starts. Returns the
    kept groups in dispatch order (so the batch does not depend on which finished first),
    every episode taken, and the counts."""
    kept: list[list[Episode]] = []
    sampled: list[Episode] = []
    stale = discarded = 0
    while len(kept) < n and stale + discarded < max_discards:
        (group,) = loop.wait_groups(1)
        group = shape(group)
        sampled += group
        if not usable(group):
            stale += 1
        elif need_signal and not informative(group):
            discarded += 1
        else:
            kept.append(group)
            continue
        loop.release(1)
    kept.sort(key=lambda grp: int(grp[0].group_id))
    return kept, sampled, {"kept_groups": float(len(kept)), "stale_groups": float(stale),
                           "discarded_groups": float(discarded)}


def run_async_rl(
    run: RLRun,
    engine: Engine | Sequence[Engine],
    groups: GroupSource | None = None,
) -> list[dict[str, float]]:
    """Run ``run``'s steps asynchronously (``cfg.async_``), with one rollout thread per engine
    (``engine`` may be several); returns the evaluations made. Single-turn tasks:
    ``run.tasks`` in the synchronous run's order, or any ``groups`` source (``TaskMixer.groups``
    mixes task families by ratio)."""
    cfg, algo, tokenizer = run.cfg, run.algo, run.tokenizer
    acfg = cfg.async_
    b, g = cfg.prompts_per_step, cfg.group_size
    update = run.policy_update()
    sampling = cfg.params((tokenizer.eos_token_id,))
    chunk = cfg.max_new_tokens if acfg.chunk_tokens is None else acfg.chunk_tokens
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    workers = [RolloutWorker(e, tokenizer, run.reward_fn, sampling, chunk) for e in engines]
    dispatcher = Dispatcher(groups or step_groups(run.tasks, run.seed, b, g), g, b,
                            acfg.max_staleness, acfg.max_inflight_per_group,
                            start_group=run.start_step * b)
    buffer = RolloutBuffer(g, acfg.max_overtake)
    evals = []
    run.reporter.start("RL (async)", cfg.steps)
    capacity = acfg.capacity or -(-b * g // len(workers))
    with AsyncRollout(workers, dispatcher, buffer, capacity) as loop:
        for step in range(run.start_step, cfg.steps):
            waited, idle, tokens = loop.trainer_wait_s, loop.rollout_idle_s, generated(workers)
            version = engines[0].version
            kept, sampled, counts = collect_groups(
                loop, b, lambda grp: shape_rewards(grp, run.shaping, step, None),
                lambda grp: acfg.stale == "mask" or fresh_enough(grp, version,
                                                                 acfg.max_staleness),
                algo.dynamic_sampling.enabled, algo.dynamic_sampling.max_rounds * b)
            episodes = [e for group in kept for e in group]
            if cfg.save_episodes:
                write_episodes(run.reporter.path.parent / "episodes.jsonl", sampled,
                               append=True)
            metrics = rollout_metrics(sampled, run.accuracy_part) | counts
            if episodes:
                metrics |= update(episodes, version, acfg.max_staleness)
                probes = [s.token_ids for e in episodes for s in e.segments][: cfg.sync.probes]
                reports = loop.call(
                    lambda e: sync_weights(run.trainer, e, version + 1, probes, cfg.sync),
                    drain=not acfg.partial_rollout, timeout=cfg.sync.timeout_s)
                metrics |= {k: max(r.metrics()[k] for r in reports) for k in reports[0].metrics()}
            loop.release(len(kept))
            if run.eval_due(step):
                (result,) = loop.call(run.held_out, drain=False, workers=[0])
                metrics |= run.record_eval(step, result, evals)
            metrics |= {"async/trainer_wait_s": loop.trainer_wait_s - waited,
                        "async/rollout_idle_s": loop.rollout_idle_s - idle,
                        "async/tokens": float(generated(workers) - tokens),
                        "async/restarts": float(loop.restarts),
                        "async/requeued": float(loop.requeued),
                        "async/duplicates": float(buffer.duplicates)}
            run.finish_step(step, metrics)
    run.reporter.finish()
    return evals
