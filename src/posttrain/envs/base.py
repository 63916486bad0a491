"""The environment contract: ``reset(task) -> observation``; ``step(action) -> StepResult``."""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from posttrain.harness import format_tool_call


@dataclass
class StepResult:
    """What an environment returns for one action."""

    observation: list[dict] | None
    reward_parts: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """A single-turn task: its opening messages and the reference a verifier checks; an optional
    ``domain`` (e.g. ``Problem.domain``) routes it to its teacher in multi-teacher distillation."""

    @property
    def reference(self) -> str: ...

    def messages(self) -> list[dict]: ...


def prepend_system(messages: list[dict], text: str) -> list[dict]:
    """``messages`` with ``text`` first in the system message (added when there is none)."""
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{text}\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


class Environment(Protocol):
    def reset(self, task: Any) -> list[dict]:
        """Chat messages the policy sees first."""
        ...

    def step(self, action: str) -> StepResult: ...


def task_identity(task: Any) -> str:
    """A task's identity as text: its messages and reference (what the curriculum keys a
    task by and the OpenEnv adapter seeds an episode from)."""
    return json.dumps([task.messages(), str(task.reference)], sort_keys=True)


def task_payload(task: Any) -> dict:
    """What a program that plays a task receives (an external agent, an environment
    library's runner): its messages, reference and dataset row (``{}`` without one)."""
    return {"messages": task.messages(), "reference": task.reference,
            "row": getattr(task, "row", {})}


class SplitTasks:
    """Problems in a ``train`` and an ``eval`` split (``splits``, set by the subclass)."""

    splits: dict[str, list]

    @staticmethod
    def held_out(total: int, eval_fraction: float) -> int:
        """How many of ``total`` items the eval split holds (at least one)."""
        if not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        return max(1, round(eval_fraction * total))

    @staticmethod
    def split_by_id(items: dict[str, object], eval_fraction: float) -> dict[str, list]:
        """``items`` (id -> problem) split by a hash of each id: ``crc32(id) mod 1000 <
        1000 eval_fraction`` is held out (at least the smallest id, and never the largest of
        two or more), so adding items never moves another between splits."""
        held = {i for i in items if zlib.crc32(i.encode()) % 1000 < eval_fraction * 1000}
        held = held or {min(items)}
        if len(items) > 1 and held == set(items):
            held.discard(max(items))
        return {"train": [p for i, p in items.items() if i not in held],
                "eval": [p for i, p in items.items() if i in held]}

    def sample(self, n: int, rng: random.Random, split: str = "train") -> list:
        """``n`` problems of ``split`` drawn with replacement with ``rng``."""
        return [rng.choice(self.splits[split]) for _ in range(n)]

    def eval_set(self, n: int) -> list:
        """The first ``n`` held-out problems (a fixed order); more than the split holds raises."""
        if n > len(self.splits["eval"]):
            raise ValueError(f"eval set of {n} asked, the eval split has "
                             f"{len(self.splits['eval'])} problems; raise task.eval_fraction")
        return self.splits["eval"][:n]


def tool_turns(calls: list[tuple[str, dict]], results: list[str]) -> list[dict]:
    """SFT turns: the assistant making ``calls`` (``(tool, arguments)``), a tool turn per result."""
    return [{"role": "assistant", "content": "".join(format_tool_call(*c) for c in calls)},
            *({"role": "tool", "content": r} for r in results)]


def answer_turn(answer: Any) -> dict:
    """The final assistant turn: ``<answer>answer</answer>``."""
    return {"role": "assistant", "content": f"<answer>{answer}</answer>"}
