"""Effort-conditioned tasks (DeepSeek V4.1, Kimi K3): the effort level goes into the system
prompt, so one prompt at several efforts makes several groups."""

from __future__ import annotations

from dataclasses import dataclass

from posttrain.envs.base import Task


def effort_system_prompt(effort: int) -> str:
    """The system-prompt line that conditions a sample on its effort level (1-100)."""
    return f"Reasoning Effort: {effort} (range 1--100; max=100, high=75, low=50)"


@dataclass(frozen=True)
class EffortTask:
    """``task`` asked at effort ``effort`` (1-100): a ``Reasoning Effort`` system line first."""

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

    def messages(self) -> list[dict]:
        return prepend_system(self.task.messages(), effort_system_prompt(self.effort))


def prepend_system(messages: list[dict], text: str) -> list[dict]:
    """``messages`` with ``text`` first in the system message (added when there is none)."""
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{text}\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
