"""Effort-conditioned tasks (DeepSeek V4.1, Kimi K3): the effort level goes into the system
prompt, so one prompt at several efforts makes several groups."""

from __future__ import annotations

from dataclasses import dataclass

from posttrain.algos import effort_system_prompt
from posttrain.envs.base import Task


@dataclass(frozen=True)
class EffortTask:
    """``task`` asked at effort ``effort`` (1-100): a ``Reasoning Effort`` system line first."""

    task: Task
    effort: int

    @property
    def reference(self) -> str:
        return self.task.reference

    def messages(self) -> list[dict]:
        messages = list(self.task.messages())
        line = effort_system_prompt(self.effort)
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": f"{line}\n{messages[0]['content']}"},
                    *messages[1:]]
        return [{"role": "system", "content": line}, *messages]
