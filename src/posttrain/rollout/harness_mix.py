"""Several harnesses in one run (``agent.harnesses``; DeepSeek V4.1 trains on several agent
harnesses at once): each task of a call goes, with its whole group, to one harness, drawn
with probability proportional to the harnesses' shares from a hash of the call's group
prefix, the task's position and the sampling seed (so a resumed run draws as the straight
one did); each harness plays its tasks with its own rollout (the built-in loop, or an external
agent's sessions), a harness's ``system`` message opening them; every episode carries
``meta["harness"]``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posttrain.engines import Engine
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


@dataclass(frozen=True)
class Harness:
    name: str
    share: float
    rollout: Callable[..., list[Episode]]
    system: str | None = None


class WithSystem:
    """``task`` opened by a system message (merged into the task's own first one)."""

    def __init__(self, task, system: str) -> None:
        self.task, self.system = task, system

    def __getattr__(self, name: str):
        return getattr(self.task, name)

    def messages(self) -> list[dict]:
        messages = self.task.messages()
        if messages and messages[0]["role"] == "system":
            return [{**messages[0], "content": f"{self.system}\n\n{messages[0]['content']}"},
                    *messages[1:]]
        return [{"role": "system", "content": self.system}, *messages]


def draw(harnesses: Sequence[Harness], key: str) -> int:
    """The harness ``key`` draws: ``u`` uniform in [0, 1) from the key's hash, against the
    cumulative shares."""
    u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    total, at = sum(h.share for h in harnesses), 0.0
    for i, h in enumerate(harnesses):
        at += h.share / total
        if u < at:
            return i
    return len(harnesses) - 1


class HarnessMix:
    """A rollout function (the ``rollout`` signature) over ``harnesses`` (module docstring)."""

    def __init__(self, harnesses: Sequence[Harness]) -> None:
        self.harnesses = list(harnesses)

    def __call__(self, engine: Engine, tokenizer, tasks: Sequence, reward_fn: RewardFunction,
                 sampling: SamplingParams, group_size: int = 1, group_prefix: str = ""
                 ) -> list[Episode]:
        chosen = [draw(self.harnesses, f"{group_prefix}:{k}:{sampling.seed}")
                  for k in range(len(tasks))]
        by_task: list[list[Episode]] = [[] for _ in tasks]
        for i, h in enumerate(self.harnesses):
            mine = [k for k, c in enumerate(chosen) if c == i]
            if not mine:
                continue
            played = [tasks[k] if h.system is None else WithSystem(tasks[k], h.system)
                      for k in mine]
            episodes = h.rollout(engine, tokenizer, played, reward_fn, sampling, group_size,
                                 f"{group_prefix}{h.name}:")
            for j, k in enumerate(mine):  # the rollout returns task j's at [j n, (j+1) n)
                for e in episodes[j * group_size:(j + 1) * group_size]:
                    e.meta["harness"] = h.name
                    by_task[k].append(e)
        return [e for episodes in by_task for e in episodes]

    def close(self) -> None:
        """Stop the harnesses' servers (external agents'; a later call starts new ones)."""
        for h in self.harnesses:
            if hasattr(h.rollout, "close"):
                h.rollout.close()
