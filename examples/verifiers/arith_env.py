"""A verifiers (0.4) environment written against its public API (``verifiers.v1``), for
``task.name: verifiers`` (docs/extending.md, Environments of other libraries): two-digit
additions posed as the quickstart's arithmetic family poses them, scored by two reward
functions, ``correct`` (the answer, weight 1) and ``format`` (an ``<answer>`` tag, weight
0.1). Taskset id ``arith_env`` (this module, found on the family's ``paths``); its config
field ``split`` picks the 200 train or 50 eval problems, ``size`` fewer."""

from __future__ import annotations

import random
import re
from typing import Literal

import verifiers.v1 as vf

ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


class Problem(vf.TaskData):
    answer: str
    split: str


class Addition(vf.Task[Problem]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        found = ANSWER.search(trace.last_reply or "")
        return float(found is not None and found.group(1) == self.data.answer)

    @vf.reward(weight=0.1)
    async def format(self, trace: vf.Trace) -> float:
        return float(ANSWER.search(trace.last_reply or "") is not None)


class AdditionConfig(vf.TasksetConfig):
    split: Literal["train", "eval", "all"] = "all"
    size: int | None = None


def problems(split: str) -> list[Problem]:
    rng = random.Random(0)
    pairs = [(rng.randrange(10, 100), rng.randrange(10, 100)) for _ in range(250)]
    return [Problem(prompt=f"What is {a:02d}+{b:02d}?", answer=str(a + b),
                    split="train" if i < 200 else "eval") for i, (a, b) in enumerate(pairs)
            if split in ("all", "train" if i < 200 else "eval")]


class AdditionTaskset(vf.Taskset[Addition, AdditionConfig]):
    def load(self):
        for problem in problems(self.config.split)[:self.config.size]:
            yield Addition(problem, self.config.task)


__all__ = ["AdditionTaskset"]
