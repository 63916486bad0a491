"""The actor as a generative reward model (``rl.actor_as_grm``; DeepSeek-V4
technical report, 2026): grading prompts built from a step's own episodes, graded by the policy and
rewarded by agreement with the episodes' verifiable outcomes."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from posttrain.algos import get
from posttrain.config.sections.features.actor_as_grm import GRADING_PART, ActorAsGRM
from posttrain.config.sections.reward import JUDGE
from posttrain.engines.chat import engine_chat
from posttrain.envs import Task
from posttrain.rewards import RewardFunction
from posttrain.rewards.judge import question_of, score_messages
from posttrain.rollout.single_turn import rollout
from posttrain.rollout.wrappers.judged import apply_judge, genrm_grades
from posttrain.types import Episode

GRADING_REWARD = RewardFunction({GRADING_PART: (JUDGE, 1.0)})


@dataclass(frozen=True)
class GradingTask:
    """A grading prompt: the ``score`` judge's prompt for ``response`` to ``question``;
    ``outcome`` is the response's verifiable result (1 right, 0 wrong)."""

    question: str
    response: str
    outcome: float
    rubric: str
    score_max: float

    @property
    def reference(self) -> str:
        return str(int(self.outcome))

    def messages(self) -> list[dict]:
        return score_messages(self.question, self.response, self.rubric, self.score_max)


def grading_conversation(conversation: list[dict], cfg: ActorAsGRM,
                         rng: random.Random) -> list[dict]:
    """``sft.gradings``: the grading prompt for the conversation's last answer, then a grade
    of 0 or ``score_max`` drawn at random (the form, not the judgement)."""
    grade = rng.choice((0, cfg.score_max))
    return [*score_messages(question_of(conversation), conversation[-1]["content"], cfg.rubric,
                            cfg.score_max),
            {"role": "assistant", "content": f"<score>{grade:g}</score>"}]


def outcome_of(episode: Episode, accuracy_part: str) -> float | None:
    """1 or 0 by ``accuracy_part`` (at least 1/2 is right); None when the part is missing."""
    if accuracy_part in episode.meta.get("missing_parts", ()):
        return None
    return float(episode.rewards[accuracy_part] >= 0.5)


def every_grading(episodes: Sequence[Episode], tasks: Sequence[Task], accuracy_part: str,
                  cfg: ActorAsGRM) -> list[GradingTask]:
    """The grading prompt of each of ``episodes`` (of ``tasks``) whose outcome is known."""
    return [GradingTask(question_of(task.messages()), ep.meta["completion"], outcome,
                        cfg.rubric, cfg.score_max)
            for ep, task in zip(episodes, tasks)
            if (outcome := outcome_of(ep, accuracy_part)) is not None]


def grading_tasks(episodes: Sequence[Episode], tasks: Sequence[Task], n: int,
                  accuracy_part: str, cfg: ActorAsGRM, rng: random.Random) -> list[GradingTask]:
    """Up to ``n`` grading prompts from ``episodes`` (of ``tasks``, in order), each drawn at
    random: when the step has both outcomes, ``n // 2`` right and as many wrong (at least
    one of each, at most the smaller side), so that a constant grade earns exactly 1/2;
    else ``n`` of the one outcome."""
    pools: dict[float, list[GradingTask]] = {1.0: [], 0.0: []}
    for t in every_grading(episodes, tasks, accuracy_part, cfg):
        pools[t.outcome].append(t)
    for pool in pools.values():
        rng.shuffle(pool)
    if not (pools[1.0] and pools[0.0]):
        return (pools[1.0] or pools[0.0])[:n]
    each = min(n // 2 or 1, len(pools[1.0]), len(pools[0.0]))
    return [t for pair in zip(pools[1.0][:each], pools[0.0][:each]) for t in pair]


def grade_agreement(grades: Sequence[float | None], outcomes: Sequence[float]) -> list[float]:
    """The catalogue's ``actor_as_grm`` of each grade (over ``score_max``; None: none written)."""
    g = torch.tensor([float("nan") if x is None else x for x in grades], dtype=torch.float64)
    return get("reward", "actor_as_grm")(
        grades=g, outcomes=torch.tensor(list(outcomes), dtype=torch.float64)).tolist()


@dataclass
class GradingRollout:
    """``rollout_fn``'s episodes, then the policy's gradings of a share of them (``cfg``),
    ``group_size`` a grading prompt, as episodes with ``meta["grading"]`` and the one reward
    part ``grading``. Grading prompts are drawn from the run's seed, the step's sampling seed
    and the group prefix."""

    rollout_fn: Callable[..., list[Episode]]
    cfg: ActorAsGRM
    accuracy_part: str
    seed: int

    def __call__(self, engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
                 sampling, group_size: int = 1, group_prefix: str = "") -> list[Episode]:
        episodes = self.rollout_fn(engine, tokenizer, tasks, reward_fn, sampling, group_size,
                                   group_prefix=group_prefix)
        n = max(1, round(self.cfg.share * len(tasks)))
        prompts = grading_tasks(episodes, [tasks[j // group_size] for j in range(len(episodes))],
                                n, self.accuracy_part, self.cfg,
                                random.Random(f"grading:{self.seed}:{sampling.seed}:"
                                              f"{group_prefix}"))
        if not prompts:  # every outcome missing: nothing to grade against
            return episodes
        gradings = rollout(engine, tokenizer, prompts, GRADING_REWARD,
                           replace(sampling, max_new_tokens=self.cfg.max_new_tokens), group_size,
                           f"{group_prefix}grading-")
        outcomes = [prompts[j // group_size].outcome for j in range(len(gradings))]
        grades = genrm_grades([e.meta["completion"] for e in gradings], 1, self.cfg.score_max)
        apply_judge(gradings, GRADING_PART, grade_agreement(grades, outcomes), GRADING_REWARD)
        for ep, grade in zip(gradings, grades):
            ep.meta.update(grading=True, grade=grade)
        return episodes + gradings


@dataclass
class GradingAccuracy:
    """At an evaluation, the policy grades each held-out episode greedily (``cfg``'s prompt):
    ``grading_accuracy`` (the mean of ``actor_as_grm``), ``grading_balanced_accuracy`` (the
    mean of its means over right and over wrong answers, where both occur) and
    ``grading_missing`` (the share without a grade), graded on ``engine``. ``tasks``: the
    evaluation's held-out tasks, each repeated for its samples."""

    cfg: ActorAsGRM
    accuracy_part: str
    tokenizer: object
    tasks: Sequence[Task]
    engine: object

    def __call__(self, episodes: Sequence[Episode]) -> dict[str, float]:
        per_task = len(episodes) // len(self.tasks)
        prompts = every_grading(episodes, [self.tasks[j // per_task]
                                           for j in range(len(episodes))],
                                self.accuracy_part, self.cfg)
        if not prompts:  # every held-out outcome missing
            return {}
        chat = engine_chat(self.engine, self.tokenizer, self.cfg.max_new_tokens)
        grades = genrm_grades(chat([p.messages() for p in prompts]), 1, self.cfg.score_max)
        agree = grade_agreement(grades, [p.outcome for p in prompts])
        by_outcome = [[a for a, p in zip(agree, prompts) if p.outcome == o] for o in (1.0, 0.0)]
        balanced = [sum(a) / len(a) for a in by_outcome if a]
        return {"grading_accuracy": sum(agree) / len(agree),
                "grading_balanced_accuracy": sum(balanced) / len(balanced),
                "grading_missing": sum(g is None for g in grades) / len(grades)}
