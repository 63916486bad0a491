"""Synchronous sampling: ``rollout`` generates completions for tasks and scores them into
``Episode``s (``score_sample`` scores one); ``SyncEpisodes`` samples an RL step's groups with
the current weights, with this or any rollout function (agent, judged); ``seek_step`` moves
tasks read as a stream to a step's prompts.

``SyncEpisodes`` and ``async_source.AsyncEpisodes`` answer the one RL loop
(``recipes.sampling_loop.rl_loop``) alike: ``take(step)`` gives the groups to train on, every
episode sampled and the counts; ``call(fn)`` runs ``fn(engine)`` on every engine (a weight
sync), ``first(fn)`` on the first (an evaluation); ``release(n)`` frees the capacity of ``n``
trained groups; ``stats()`` reports the step's rollout figures."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from posttrain.config import DynamicSamplingConfig, RLConfig, ShapingRule
from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.rewards.compose import Scored
from posttrain.rewards.user_reward import Sample
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.rollout.scoring import fill_missing, informative, shape_rewards
from posttrain.types import Episode, SamplingParams, Segment
from posttrain.types.sampling import step_seed

T = TypeVar("T")


def seek_step(tasks: Any, step: int, prompts_per_step: int) -> None:
    """Point tasks read as a stream (those with a ``seek``, e.g. a streamed dataset) at step
    ``step``'s first prompt, number ``step * prompts_per_step`` of the stream: the step number
    is their data cursor, as ``(seed, step)`` is for tasks drawn at random, so a resumed run
    draws what an uninterrupted one did. Other tasks need nothing."""
    seek = getattr(tasks, "seek", None)
    if seek is not None:
        seek(step * prompts_per_step)


def rollout(engine: Engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
            sampling: SamplingParams, group_size: int = 1, group_prefix: str = "", *,
            env_score: Callable | None = None) -> list[Episode]:
    """``group_size`` scored episodes per task; episodes of task ``k`` share group ``prefix-k``.
    The samples are scored as one batch; a missing part takes its group's mean
    (``rollout.missing``). ``env_score(engine, tokenizer, tasks, completions, sampling)``
    (a family's ``TaskParts.env_score``) gives each sample's parts with verifier ``env`` and
    what goes into its ``meta``, as ``(parts, meta)``.

    An empty completion is kept (the segment has no trainable token) and scores 0.
    """
    prompts = [encode_prompt(tokenizer, t.messages()) for t in tasks]
    outs = engine.generate([p for p in prompts for _ in range(group_size)], sampling)
    task_of = [tasks[j // group_size] for j in range(len(outs))]
    samples = [sample_of(tokenizer, t, o.token_ids) for t, o in zip(task_of, outs)]
    envs = [({}, {})] * len(samples) if env_score is None else env_score(
        engine, tokenizer, task_of, [s.completion for s in samples], sampling)
    scores = reward_fn.score(samples, [parts for parts, _ in envs] if env_score else None)
    episodes = [scored_episode(reward_fn, s, scored, out.prompt_ids, out.token_ids, out.logprobs,
                               out.version, out.finish_reason,
                               f"{group_prefix}{j // group_size}", t, out.routing)
                for j, (t, s, scored, out) in enumerate(zip(task_of, samples, scores, outs))]
    for e, (_, meta) in zip(episodes, envs):
        e.meta |= meta
    fill_missing(episodes, reward_fn)
    return episodes


def sample_of(tokenizer, task: Task, token_ids: list[int]) -> Sample:
    """What reward functions may read of a completion of ``task``."""
    return Sample(tokenizer.decode(token_ids, skip_special_tokens=True), task.reference,
                  tuple(token_ids), tuple(task.messages()), getattr(task, "row", {}))


def scored_episode(reward_fn: RewardFunction, sample: Sample, scored: Scored, prompt_ids: list[int],
                   token_ids: list[int], logprobs: list[float], versions: int | list[int],
                   finish_reason: str, group_id: str, task: Task, routing=None) -> Episode:
    """One scored single-turn episode (``versions``: one, or one per completion token;
    ``routing``: the engine's experts of its tokens, for routing replay)."""
    segment = Segment.from_prompt_completion(prompt_ids, token_ids, logprobs, version=versions,
                                             routing=routing)
    return Episode(segments=[segment], rewards=scored.parts, reward=scored.total,
                   group_id=group_id, finish_reason=finish_reason,
                   meta={"completion": sample.completion, "reference": task.reference,
                         "domain": getattr(task, "domain", None),
                         **getattr(task, "meta", {}), **reward_fn.episode_meta(scored)})


def score_sample(tokenizer, task: Task, reward_fn: RewardFunction, prompt_ids: list[int],
                 token_ids: list[int], logprobs: list[float], versions: int | list[int],
                 finish_reason: str, group_id: str) -> Episode:
    """One sample scored on its own (the rollout workers'; its group fills a missing part when
    it completes)."""
    sample = sample_of(tokenizer, task, token_ids)
    return scored_episode(reward_fn, sample, reward_fn.score([sample])[0], prompt_ids,
                          token_ids, logprobs, versions, finish_reason, group_id, task)


def asked(drawn: Sequence[Task], variants: Sequence[Callable[[Task], Task]]) -> list[Task]:
    """The tasks a step asks of the prompts ``drawn``: each in every one of ``variants`` (one
    group each), in order; none: as drawn."""
    return [v(p) for p in drawn for v in variants] if variants else list(drawn)


@dataclass(frozen=True)
class RolloutPlan:
    """Where an RL step's episodes come from and how they are scored, made once for the loop:
    ``tasks`` encoded by ``tokenizer``, sampled as ``sampling`` says (each step seeds it),
    scored by ``reward_fn``; the loop's ``cfg`` (``prompts_per_step`` x ``group_size``, the
    async settings), ``dynamic`` sampling, the ``shaping`` rules (``prompt_budgets``:
    per-prompt budgets of those with ``budget: auto``; ``shaping_inputs``: fixed values the
    features offer them), the run's ``seed`` and the ``variants`` a drawn prompt is asked in
    (``Task -> Task``, one group each; none: as drawn)."""

    tokenizer: Any
    tasks: Any
    reward_fn: RewardFunction
    cfg: RLConfig
    sampling: SamplingParams
    dynamic: DynamicSamplingConfig
    shaping: Sequence[ShapingRule]
    seed: int
    prompt_budgets: PromptBudgets | None = None
    shaping_inputs: Mapping[str, Any] = field(default_factory=dict)
    variants: Sequence[Callable[[Task], Task]] = ()


@dataclass
class SyncEpisodes:
    """Step ``k`` samples ``prompts_per_step`` prompts drawn from ``(seed, k)`` alone (each in
    the plan's ``variants``: one group per (prompt, variant)) with ``rollout_fn`` on ``engine``,
    as ``plan`` says; with dynamic sampling it keeps the groups that carry signal and, in
    ``resample`` mode, draws fresh prompts (round ``r`` from ``(seed, k, r)``) until
    ``prompts_per_step`` do or the rounds run out. Tasks read as a stream draw from position
    ``k * prompts_per_step`` on (``seek_step``; resampled rounds read ahead: the next step's
    first prompts). Behaviour log-probs are the current weights' (``on_policy``). Evaluation
    plays ``eval_rollout_fn`` (null: ``rollout_fn``)."""

    engine: Engine
    plan: RolloutPlan
    rollout_fn: Callable[..., list[Episode]] = rollout
    eval_rollout_fn: Callable[..., list[Episode]] | None = None  # what evaluation plays
    title = "RL"
    on_policy = True
    version: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.eval_rollout_fn = self.eval_rollout_fn or self.rollout_fn

    def __enter__(self) -> SyncEpisodes:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def _sample(self, step: int, n: int, round_: int) -> list[Episode]:
        plan = self.plan
        drawn = plan.tasks.sample(n, random.Random(f"{plan.seed}:rl:{step}:{round_}"))
        problems = asked(drawn, plan.variants)
        sampling = replace(plan.sampling, seed=step_seed(plan.seed, step) + round_)
        episodes = self.rollout_fn(self.engine, plan.tokenizer, problems, plan.reward_fn,
                                   sampling, plan.cfg.group_size, group_prefix=f"{round_}-")
        if hasattr(plan.tasks, "observe"):  # a curriculum learns each task's pass rate
            plan.tasks.observe(drawn, episodes, step)
        return shape_rewards(episodes, plan.shaping, step, plan.prompt_budgets,
                             plan.shaping_inputs)

    def take(self, step: int) -> tuple[list[Episode], list[Episode], dict[str, float]]:
        cfg, dynamic = self.plan.cfg, self.plan.dynamic
        self.version = step
        seek_step(self.plan.tasks, step, cfg.prompts_per_step)
        first = self._sample(step, cfg.prompts_per_step, 0)
        if not dynamic.enabled:
            return first, first, {}
        per_prompt = len(self.plan.variants) or 1
        target = cfg.prompts_per_step * per_prompt
        episodes, extra = informative(first), 0
        if dynamic.mode == "resample":
            for round_ in range(1, dynamic.max_rounds + 1):
                missing = target - len(episodes) // cfg.group_size
                if missing <= 0:
                    break
                more = self._sample(step, math.ceil(missing / per_prompt), round_)
                extra += len(more)
                episodes += informative(more)
            episodes = episodes[: target * cfg.group_size]
        return episodes, first, {"extra_generations": float(extra),
                                 "kept_groups": float(len(episodes) // cfg.group_size)}

    @property
    def engines(self) -> list[Engine]:
        return [self.engine]

    def staleness(self) -> tuple:
        return ()

    def call(self, fn: Callable[[Engine], T], drain: bool = True) -> list[T]:
        return [fn(self.engine)]

    def first(self, fn: Callable[[Engine], T]) -> T:
        return fn(self.engine)

    def release(self, groups: int) -> None:
        pass

    def stats(self) -> dict[str, float]:
        """A curriculum's pool shares (``curriculum/<pool>``), if the tasks have one."""
        return self.plan.tasks.stats() if hasattr(self.plan.tasks, "stats") else {}
