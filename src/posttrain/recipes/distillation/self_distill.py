"""Self-distillation presets (``self_distill``: SDFT, SDPO, OPSD): the teacher is the student's
own weights, without gradient, given privileged context ``z`` before the question; the student
sees the question alone, and ``z``'s tokens are never in its loss.

- ``sdft``: ``z`` = a demonstration (the task's worked solution, ``task.completion()``).
- ``sdpo``: ``z`` = a successful sibling from the sample's group (the highest reward above the
  sample's own), else feedback on the sample's own attempt and its reward.
- ``opsd``: ``z`` = the verified solution (``task.reference``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from posttrain.envs import Task, prepend_system
from posttrain.recipes.distillation.teachers import Teacher
from posttrain.types import Episode

Context = Callable[[Task, Episode, list[Episode]], list[dict]]


def demonstration(task: Task, episode: Episode, group: list[Episode]) -> str:
    if not hasattr(task, "completion"):
        raise ValueError(f"self_distill sdft needs tasks with a demonstration (completion()); "
                         f"{type(task).__name__} has none")
    return f"A worked solution to this problem:\n{task.completion()}"


def feedback(task: Task, episode: Episode, group: list[Episode]) -> str:
    best = max(group, key=lambda e: e.reward)
    if best.reward > episode.reward:
        return f"A successful attempt at this problem:\n{best.meta['completion']}"
    return (f"Feedback on an earlier attempt:\n{episode.meta['completion']}\n"
            f"It scored {episode.reward:.2f}.")


def solution(task: Task, episode: Episode, group: list[Episode]) -> str:
    return f"The verified answer is {task.reference}."


PRIVILEGED: dict[str, Callable[[Task, Episode, list[Episode]], str]] = {
    "sdft": demonstration, "sdpo": feedback, "opsd": solution}


def privileged_context(preset: str) -> Context:
    """The teacher's prompt of ``preset``: ``z`` first in the system message, then the question."""
    z = PRIVILEGED[preset]
    return lambda task, episode, group: prepend_system(task.messages(), z(task, episode, group))


def self_teacher(preset: str, model: torch.nn.Module) -> Teacher:
    """The student ``model`` (its live weights: the teacher moves with it) as its own
    teacher under ``preset``'s privileged context."""
    return Teacher(f"self ({preset})", model, context=privileged_context(preset))
