"""The environment contract: ``reset(task) -> observation``; ``step(action) -> StepResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class StepResult:
    """What an environment returns for one action."""

    observation: list[dict] | None
    reward_parts: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """A single-turn task: the opening messages and the reference a verifier checks against."""

    @property
    def reference(self) -> str: ...

    def messages(self) -> list[dict]: ...


class Environment(Protocol):
    def reset(self, task: Any) -> list[dict]:
        """Chat messages the policy sees first."""
        ...

    def step(self, action: str) -> StepResult: ...
