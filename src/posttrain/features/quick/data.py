"""Quick-instruction rows from the built-in task families (docs/quick_instructions.md): each
row is one task's prompt and the answers to ``<action>`` (``search`` when the answer must be
looked up, ``ask`` when the user must be asked first, else ``answer``), ``<query>`` (what to
look up, else ``none``) and ``<domain>`` (the task's subject). Train rows come from the
families' train splits, held-out rows from their eval splits (search questions about cards
the train rows never name)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain.envs import ArithmeticTasks
from posttrain.envs.code import CodeTasks
from posttrain.envs.kernel import KernelTasks
from posttrain.envs.lookup import LookupTasks
from posttrain.envs.search import SearchTasks
from posttrain.envs.typed_user import TypedUserTasks

INSTRUCTIONS = ("<action>", "<query>", "<domain>")


@dataclass(frozen=True)
class Source:
    """A task family, its subject, and what to do first for one of its problems."""

    name: str
    build: Callable[[int], Any]  # seed -> the task source
    domain: str
    action: str
    query: Callable[[Any], str] = lambda problem: "none"


SOURCES = (
    Source("arithmetic", lambda seed: ArithmeticTasks(("+", "-", "*"), seed=seed), "math",
           "answer"),
    Source("search", SearchTasks, "facts", "search", lambda p: p.doc.title),
    Source("lookup", LookupTasks, "records", "search", lambda p: " ".join(p.names)),
    Source("code", CodeTasks, "code", "answer"),
    Source("kernel", lambda seed: KernelTasks(), "kernels", "answer"),
    Source("typed_user", TypedUserTasks, "shopping", "ask"),
)


def quick_rows(n: int, split: str = "train", seed: int = 0) -> list[dict]:
    """``n`` rows (``messages``, ``quick``, ``source``), the families in turn, drawn from
    their ``split`` ("train" or "eval") with a generator seeded by ``seed`` and ``split``."""
    rng = random.Random(f"quick:{seed}:{split}")
    tasks = [s.build(seed) for s in SOURCES]
    rows = []
    for i in range(n):
        source, family = SOURCES[i % len(SOURCES)], tasks[i % len(SOURCES)]
        (problem,) = family.sample(1, rng, split)
        answers = (source.action, source.query(problem), source.domain)
        rows.append({"messages": problem.messages(), "quick": dict(zip(INSTRUCTIONS, answers)),
                     "source": source.name})
    return rows
