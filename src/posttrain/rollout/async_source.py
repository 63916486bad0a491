"""``AsyncEpisodes``: where an asynchronous RL step's episodes come from, for the one RL loop
(``recipes.sampling_loop.rl_loop``; the synchronous twin is ``single_turn.SyncEpisodes``). Rollout
threads generate continuously under a staleness bound (single-turn samples or an external
agent's sessions, sample-level dispatch, partial rollout; docs/async.md); a step takes complete
groups from them."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from posttrain.engines import Engine, row_seeds
from posttrain.envs import Task
from posttrain.rollout.async_loop import AsyncRollout, Worker
from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher, GroupSource
from posttrain.rollout.external import ExternalAgentRollout
from posttrain.rollout.scoring import fill_missing, informative, shape_rewards
from posttrain.rollout.single_turn import RolloutPlan, rollout, seek_step
from posttrain.rollout.worker import RolloutWorker
from posttrain.types import Episode
from posttrain.types.sampling import step_seed

T = TypeVar("T")


def step_groups(tasks, seed: int, prompts_per_step: int, group_size: int) -> GroupSource:
    """Groups in the synchronous run's order: prompts and row seeds of its first rounds (a
    stream of tasks is read from step ``k``'s position, ``seek_step``)."""

    @functools.lru_cache(maxsize=4)
    def step_batch(step: int) -> tuple[list[Task], list[int]]:
        seek_step(tasks, step, prompts_per_step)
        problems = tasks.sample(prompts_per_step, random.Random(f"{seed}:rl:{step}:0"))
        return problems, row_seeds(step_seed(seed, step), prompts_per_step * group_size)

    def source(group: int) -> tuple[Task, list[int]]:
        step, k = divmod(group, prompts_per_step)
        problems, seeds = step_batch(step)
        return problems[k], seeds[k * group_size : (k + 1) * group_size]

    return source


def fresh_enough(group: list[Episode], version: int, max_staleness: int) -> bool:
    """Every trainable token was sampled at most ``max_staleness`` versions ago."""
    return all(version - v <= max_staleness for e in group for s in e.segments
               for v, m in zip(s.versions, s.loss_mask) if m)


class AsyncEpisodes:
    """Rollout threads, one per engine, generate continuously; step ``s`` trains on the first
    ``prompts_per_step`` complete groups it can take (``RolloutBuffer``'s order). Groups are
    prompt ``n % B`` of the synchronous run's step ``n // B`` with its per-sample seeds (or any
    ``groups`` source), so at ``max_staleness: 0`` the tokens are the synchronous run's. A group
    is shaped, then dropped and replaced if stale (``stale: drop``) or, with dynamic sampling,
    without signal, until ``B`` are kept or ``max_rounds * B`` were dropped. With ``agent``
    each sample is a session of that external agent (``ExternalAgentWorker``), and evaluation
    plays sessions too. Evaluation plays ``eval_rollout_fn`` (null: ``agent``'s or one
    completion a sample); when it is a wrapper that adds to a played group
    (``finish_group(engine, tokenizer, episodes, task_of, reward_fn, sampling)``, a feature's
    ``wrap_rollout``), every group the step takes gets that too."""

    title = "RL (async)"
    on_policy = False  # the update's mismatch includes the policy's lag behind the samples

    def __init__(self, engines: Sequence[Engine], plan: RolloutPlan, start_step: int,
                 groups: GroupSource | None = None,
                 agent: ExternalAgentRollout | None = None,
                 eval_rollout_fn: Callable[..., list[Episode]] | None = None) -> None:
        cfg, tokenizer, reward_fn = plan.cfg, plan.tokenizer, plan.reward_fn
        acfg, b, g = cfg.async_, cfg.prompts_per_step, cfg.group_size
        self.plan, self.engines = plan, engines
        chunk = cfg.max_new_tokens if acfg.chunk_tokens is None else acfg.chunk_tokens
        sampling = plan.sampling
        self.workers: list[Worker] = [
            RolloutWorker(e, tokenizer, reward_fn, sampling, chunk) if agent is None
            else agent.worker(e, tokenizer, reward_fn, sampling) for e in engines]
        self.eval_rollout_fn = eval_rollout_fn or agent or rollout  # what evaluation plays
        self.finisher = getattr(self.eval_rollout_fn, "finish_group", None)
        self._tasks: dict[int, Task] = {}  # a dispatched group's task, until it is taken
        dispatcher = Dispatcher(self._remembered(groups or step_groups(plan.tasks, plan.seed,
                                                                       b, g)),
                                g, b, acfg.max_staleness, acfg.max_inflight_per_group,
                                start_group=start_step * b)
        self.buffer = RolloutBuffer(g, acfg.max_overtake)
        capacity = acfg.capacity or -(-b * g // len(self.workers))
        self.loop = AsyncRollout(self.workers, dispatcher, self.buffer, capacity)
        self.version = 0
        self._marks = (0.0, 0.0, 0)

    def _remembered(self, source: GroupSource) -> GroupSource:
        """``source``, keeping each group's task while ``finish_group`` needs it."""
        if self.finisher is None:
            return source

        def remembering(group: int) -> tuple[Task, list[int]]:
            task, seeds = source(group)
            self._tasks[group] = task
            return task, seeds

        return remembering

    def _finish(self, group: list[Episode], task: Task) -> None:
        """``finish_group`` on the group (of ``task``) on the first engine, at its next chunk
        boundary (tokens it samples carry that engine's weight version)."""
        plan, tasks = self.plan, [task] * len(group)
        self.first(lambda engine: self.finisher(engine, plan.tokenizer, group, tasks,
                                                plan.reward_fn, plan.sampling))

    def __enter__(self) -> AsyncEpisodes:
        self.loop.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.loop.__exit__(*exc)
        for worker in self.workers:
            worker.close()

    def _generated(self) -> int:
        return sum(w.tokens_generated for w in self.workers)

    def take(self, step: int) -> tuple[list[Episode], list[Episode], dict[str, float]]:
        """Groups until ``B`` are kept or too many were dropped (a dropped group's capacity is
        released at once so a replacement starts); kept groups in dispatch order."""
        plan, loop = self.plan, self.loop
        acfg, b, dynamic = plan.cfg.async_, plan.cfg.prompts_per_step, plan.dynamic
        self._marks = (loop.trainer_wait_s, loop.rollout_idle_s, self._generated())
        self.version = self.engines[0].version
        kept: list[list[Episode]] = []
        sampled: list[Episode] = []
        stale = discarded = 0
        while len(kept) < b and stale + discarded < dynamic.max_rounds * b:
            (group,) = loop.wait_groups(1)
            fill_missing(group, plan.reward_fn)
            task = self._tasks.pop(int(group[0].group_id), None)
            group = shape_rewards(group, plan.shaping, step, plan.prompt_budgets,
                                  plan.shaping_inputs)
            sampled += group
            if acfg.stale == "drop" and not fresh_enough(group, self.version, acfg.max_staleness):
                stale += 1
            elif dynamic.enabled and not informative(group):
                discarded += 1
            else:
                if self.finisher is not None:  # only kept groups
                    self._finish(group, task)
                kept.append(group)
                continue
            loop.release(1)
        kept.sort(key=lambda grp: int(grp[0].group_id))
        return [e for group in kept for e in group], sampled, {
            "kept_groups": float(len(kept)), "stale_groups": float(stale),
            "discarded_groups": float(discarded)}

    def staleness(self) -> tuple:
        return self.version, self.plan.cfg.async_.max_staleness

    def call(self, fn: Callable[[Engine], T], drain: bool = True) -> list[T]:
        return self.loop.call(fn, drain=drain and not self.plan.cfg.async_.partial_rollout,
                              timeout=self.plan.cfg.sync.timeout_s)

    def first(self, fn: Callable[[Engine], T]) -> T:
        (result,) = self.loop.call(fn, drain=False, workers=[0])
        return result

    def release(self, groups: int) -> None:
        self.loop.release(groups)

    def stats(self) -> dict[str, float]:
        loop, (waited, idle, tokens) = self.loop, self._marks
        return {"async/trainer_wait_s": loop.trainer_wait_s - waited,
                "async/rollout_idle_s": loop.rollout_idle_s - idle,
                "async/tokens": float(self._generated() - tokens),
                "async/restarts": float(loop.restarts), "async/requeued": float(loop.requeued),
                "async/duplicates": float(self.buffer.duplicates)}
