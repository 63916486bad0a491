"""Effort-conditioned tasks (DeepSeek V4.1, Kimi K3): the effort level goes into the system
prompt, so one prompt at several efforts makes several groups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from posttrain.envs import Task, prepend_system


def effort_system_prompt(effort: int) -> str:
    """The system-prompt line that conditions a sample on its effort level (1-100)."""
    return f"Reasoning Effort: {effort} (range 1--100; max=100, high=75, low=50)"


@dataclass(frozen=True)
class EffortTask:
    """``task`` asked at effort ``effort`` (1-100): a ``Reasoning Effort`` system line first;
    its episodes' ``meta["effort"]`` is the level."""

    task: Task
    effort: int

    @property
    def reference(self) -> str:
        return self.task.reference

    @property
    def domain(self) -> str | None:
        return getattr(self.task, "domain", None)

    @property
    def row(self) -> dict:
        """The task's dataset row (``eval.group_by`` and reward functions read it)."""
        return getattr(self.task, "row", {})

    @property
    def meta(self) -> dict:
        """What its episodes record of it."""
        return {"effort": self.effort}

    def messages(self) -> list[dict]:
        return prepend_system(self.task.messages(), effort_system_prompt(self.effort))


def with_efforts(run, out) -> None:
    """``task.efforts``: every prompt is asked at each level (one group each; SFT examples
    draw one), evaluation at the highest, and reward shaping reads the grid."""
    efforts = run.cfg.task.efforts
    if not efforts:
        return
    run.eval_tasks = [EffortTask(t, max(efforts)) for t in run.eval_tasks]
    run.variants = tuple(partial(EffortTask, effort=b) for b in efforts)
    run.shaping_inputs["effort_grid"] = efforts
