"""Your own task, reward, judge, rollout function and tool, named in config by dotted path
(docs/extending.md). Run from the repository root:

    posttrain train examples/extensions/reverse.yaml

The task: reverse a short word. Each object below is plain Python; posttrain checks at config
time that each one can be called as its kind is called.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.envs import SplitTasks
from posttrain.rollout import rollout

LETTERS = "abcdefgh"


@dataclass(frozen=True)
class ReverseTask:
    """One problem: the opening messages and the reference the reward checks against."""

    word: str

    @property
    def reference(self) -> str:
        return self.word[::-1]

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": f"Reverse the word {self.word}."}]


class ReverseTasks(SplitTasks):
    """Every word of three letters from ``LETTERS``, shuffled by the run's seed, with a held-out
    split (``SplitTasks`` gives ``sample(n, rng)`` and ``eval_set(n)``)."""

    def __init__(self, seed: int, eval_fraction: float) -> None:
        words = [a + b + c for a in LETTERS for b in LETTERS for c in LETTERS]
        random.Random(seed).shuffle(words)
        held = self.held_out(len(words), eval_fraction)
        tasks = [ReverseTask(w) for w in words]
        self.splits = {"train": tasks[held:], "eval": tasks[:held]}


def make_tasks(seed: int, eval_fraction: float) -> ReverseTasks:
    """The task source (``task.name``): called once with the run's seed and held-out share."""
    return ReverseTasks(seed, eval_fraction)


def reversed_exactly(completion: str, reference: str) -> float:
    """A reward function (``reward.parts.<part>.verifier``): 1 when the answer is the reversed
    word. An exception or a non-finite value scores 0 rather than stopping the run."""
    return float(completion.strip().lower() == reference)


def brevity(episodes: Sequence, tasks: Sequence) -> list[float | None]:
    """A judge (``reward.judges.<part>`` with ``kind: function``): one score per episode, or
    None where it cannot tell (imputed with the group's mean). Here: short answers score 1."""
    return [1.0 / (1 + max(0, len(e.meta["completion"]) - 3)) for e in episodes]


def logged_rollout(engine, tokenizer, tasks, reward_fn, sampling, group_size=1,
                   group_prefix=""):
    """A rollout function (``task.rollout``): plays and scores the episodes. This one is the
    built-in single-turn rollout, marking each episode it made."""
    episodes = rollout(engine, tokenizer, tasks, reward_fn, sampling, group_size, group_prefix)
    for e in episodes:
        e.meta["played_by"] = "logged_rollout"
    return episodes


def count_letter(word: str, letter: str) -> int:
    """Count how often a letter occurs in a word.

    Args:
        word: The word to look in.
        letter: The letter to count.
    """
    return word.count(letter)
