"""Judges as RL reward parts (docs/reward_models.md): after a rollout, each judged part of the
reward is filled in for every episode by a judge — a prompted generative grader (``genrm``:
rubric, score extraction that survives garbage; or the policy itself, ``PolicyJudge``), a
round-robin comparison of the group's answers by a prompted judge or a pairwise classifier
(``group_binary_comparison``: an answer over the verbosity budget loses without a comparison),
or a Bradley–Terry reward model's scalar head.

A sample the judge leaves unscored (no parsable output) is marked missing, never scored 0
silently (``rollout.missing``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from posttrain.algos import get
from posttrain.config.sections.reward import DEFAULT_RUBRIC
from posttrain.data.preference_pairs import PreferencePair, comparison_batch
from posttrain.engines.chat import Chat, engine_chat
from posttrain.envs import Task
from posttrain.models import sequence_scores
from posttrain.models.devices import model_device
from posttrain.rewards import RewardFunction
from posttrain.rewards.judge import (
    comparison_messages,
    extract_verdict,
    question_of,
    score_messages,
)
from posttrain.rollout.scoring import fill_missing, groups
from posttrain.types import Batch, Episode

Judge = Callable[[Sequence[Episode], Sequence[Task]], list[float | None]]


@dataclass
class ScoreJudge:
    """``genrm``: ``n_samples`` gradings a sample, the mean of those that parse over
    ``score_max``; None when none parse."""

    chat: Chat
    rubric: str = DEFAULT_RUBRIC
    n_samples: int = 1
    score_max: float = 10.0

    def __call__(self, episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float | None]:
        n = self.n_samples
        replies = self.chat([score_messages(question_of(t.messages()), e.meta["completion"],
                                            self.rubric, self.score_max)
                             for e, t in zip(episodes, tasks) for _ in range(n)])
        return genrm_grades(replies, n, self.score_max)


def genrm_grades(replies: Sequence[str], n: int, score_max: float) -> list[float | None]:
    """``genrm`` of each run of ``n`` consecutive replies: the mean of the grades that parse,
    over ``score_max``; None when none does."""
    genrm = get("reward_model", "genrm")
    graded = [genrm(outputs=replies[i:i + n], score_max=score_max)
              for i in range(0, len(replies), n)]
    return [None if failed else value for value, failed in graded]


@dataclass
class PolicyJudge:
    """``genrm`` by the policy itself: a ``ScoreJudge`` whose chat is the rollout's own engine
    (``on_engine``), so it grades with the weights being trained."""

    rubric: str
    n_samples: int
    score_max: float
    max_new_tokens: int
    temperature: float
    seed: int

    def on_engine(self, engine, tokenizer) -> ScoreJudge:
        chat = engine_chat(engine, tokenizer, self.max_new_tokens, self.temperature, self.seed)
        return ScoreJudge(chat, self.rubric, self.n_samples, self.score_max)


# (question, answer A, answer B) -> the probability that A is the better answer, None: unknown
Compare = Callable[[Sequence[tuple[str, str, str]]], list[float | None]]


def chat_compare(chat: Chat, rubric: str = DEFAULT_RUBRIC) -> Compare:
    """A prompted judge's verdicts (``<winner>A|B|tie</winner>``: 1, 0, 0.5)."""
    return lambda triples: [extract_verdict(r) for r in chat(
        [comparison_messages(q, a, b, rubric) for q, a, b in triples])]


@dataclass
class ClassifierCompare:
    """A pairwise classifier (``posttrain reward-model`` with ``rm.loss:
    pairwise_classifier``): ``(sigmoid s(x, a, b) + 1 - sigmoid s(x, b, a)) / 2``."""

    model: torch.nn.Module
    tokenizer: Any
    micro_batch_size: int = 16

    @torch.no_grad()
    def __call__(self, triples: Sequence[tuple[str, str, str]]) -> list[float | None]:
        self.model.eval()
        pairs = [PreferencePair(({"role": "user", "content": q},), a, b) for q, a, b in triples]
        probs = []
        for i in range(0, len(pairs), self.micro_batch_size):
            batch = comparison_batch(self.tokenizer, pairs[i:i + self.micro_batch_size]
                                     ).to(model_device(self.model))
            scores = sequence_scores(self.model, batch.input_ids, batch.attention_mask)
            p = torch.sigmoid(scores.float())
            probs += ((p[0::2] + 1 - p[1::2]) / 2).tolist()
        return probs


@dataclass
class ComparisonJudge:
    """``group_binary_comparison``: every pair of a group compared once by ``compare``; an
    answer longer than ``budget_tokens`` loses to any within it (two over it tie) without a
    comparison. A pair ``compare`` cannot decide counts as a tie; a sample none of whose
    compared pairs was decided is unscored."""

    compare: Compare
    budget_tokens: int | None = None

    def __call__(self, episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float | None]:
        out: list[float | None] = [None] * len(episodes)
        for rows in groups(episodes).values():
            over = torch.tensor([self.budget_tokens is not None and
                                 episodes[r].segments[0].num_trainable > self.budget_tokens
                                 for r in rows])
            pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))
                     if not (over[i] or over[j])]
            verdicts = self.compare([(question_of(tasks[rows[i]].messages()),
                                      episodes[rows[i]].meta["completion"],
                                      episodes[rows[j]].meta["completion"]) for i, j in pairs])
            outcomes = torch.full((len(rows), len(rows)), 0.5, dtype=torch.float64)
            asked, decided = [0] * len(rows), [0] * len(rows)
            for (i, j), verdict in zip(pairs, verdicts):
                for k in (i, j):
                    asked[k] += 1
                    decided[k] += verdict is not None
                if verdict is not None:
                    outcomes[i, j] = verdict
            scores = get("reward_model", "group_binary_comparison")(outcomes=outcomes,
                                                                    over_budget=over)
            for k, r in enumerate(rows):  # never compared: decided by the budget alone
                out[r] = float(scores[k]) if decided[k] or not asked[k] else None
        return out


@dataclass
class RewardModelJudge:
    """A Bradley–Terry reward model (``run_reward_model``): its scalar head on the episode's
    last token. Always scores."""

    model: torch.nn.Module
    pad_token_id: int
    micro_batch_size: int = 16

    @torch.no_grad()
    def __call__(self, episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float | None]:
        self.model.eval()
        out: list[float | None] = []
        for i in range(0, len(episodes), self.micro_batch_size):
            batch = Batch.from_episodes(episodes[i:i + self.micro_batch_size],
                                        self.pad_token_id).to(model_device(self.model))
            out += sequence_scores(self.model, batch.input_ids, batch.attention_mask).tolist()
        return out


def apply_judge(episodes: Sequence[Episode], part: str, scores: Sequence[float | None],
                reward_fn: RewardFunction) -> None:
    """Set reward part ``part`` of every episode from ``scores`` (None: missing, then filled
    from its group, ``rollout.missing``) and recompute each total with ``reward_fn``'s weights."""
    for ep, score in zip(episodes, scores):
        if part not in ep.meta.setdefault("fallible_parts", []):  # a rollout of one's own
            ep.meta["fallible_parts"].append(part)
        if score is None:
            ep.meta.setdefault("missing_parts", []).append(part)
        ep.rewards[part] = 0.0 if score is None else float(score)
        ep.reward = reward_fn.total(ep.rewards)
    fill_missing(episodes, reward_fn)


@dataclass
class JudgedRollout:
    """A rollout function whose episodes then get their judged parts (``judges``: part name ->
    judge); single-turn rollouts, ``group_size`` episodes a task."""

    rollout_fn: Callable[..., list[Episode]]
    judges: Mapping[str, Judge] = field(default_factory=dict)

    def __call__(self, engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
                 sampling, group_size: int = 1, group_prefix: str = "") -> list[Episode]:
        episodes = self.rollout_fn(engine, tokenizer, tasks, reward_fn, sampling, group_size,
                                   group_prefix=group_prefix)
        task_of = [tasks[j // group_size] for j in range(len(episodes))]
        for part, judge in self.judges.items():
            if isinstance(judge, PolicyJudge):
                judge = judge.on_engine(engine, tokenizer)
            apply_judge(episodes, part, judge(episodes, task_of), reward_fn)
        return episodes
