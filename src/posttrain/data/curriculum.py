"""An online difficulty curriculum for RL (``task.curriculum``; prime-rl's difficulty pools):
each task of a fixed pool keeps its latest pass rate (the mean accuracy part of the group
it was last sampled in), falls into the first pool whose threshold the rate does not exceed,
and is drawn, with replacement, with that pool's weight; a task never sampled has weight
``unseen_weight``.

The state is written to a record in the run directory (``curriculum.jsonl``, one line a
step: the pass rates it observed). A checkpoint keeps the record's length and a resumed run
cuts it back and replays it, so the sampler resumes exactly: its draws are a function of
the step's seed and this state alone.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain.config.sections.task import CurriculumConfig, DifficultyPool
from posttrain.envs.base import task_identity
from posttrain.types import Episode


def task_key(task: Any) -> str:
    """A task's identity across steps: a hash of its messages and reference."""
    return hashlib.sha1(task_identity(task).encode()).hexdigest()[:16]


class CurriculumTasks:
    """``tasks`` (``sample``/``eval_set``) drawn by difficulty (the module's docstring). The
    pool is the train split where the source has one (``splits``), else ``cfg.pool_size``
    tasks drawn once from it; ``path``: the record (None: state in memory only)."""

    def __init__(self, tasks: Any, cfg: CurriculumConfig, accuracy_part: str, seed: int,
                 path: Path | None = None) -> None:
        self.tasks, self.cfg, self.accuracy_part, self.path = tasks, cfg, accuracy_part, path
        splits = getattr(tasks, "splits", None)
        drawn = list(splits["train"]) if splits else tasks.sample(
            cfg.pool_size, random.Random(f"{seed}:curriculum"))
        unique = {task_key(t): t for t in drawn}  # a task drawn twice is one task
        if not unique:
            raise ValueError("task.curriculum: the task family has no training tasks")
        self.keys, self.pool = list(unique), list(unique.values())
        self.rates: dict[str, float] = {}
        if path is not None and path.is_file():
            for line in path.read_text().splitlines():
                self.rates.update(json.loads(line)["rates"])

    def __getattr__(self, name: str) -> Any:  # eval_set and the rest: the source's
        return getattr(self.tasks, name)

    def pool_of(self, key: str) -> DifficultyPool | None:
        """The pool of a task: the first whose threshold its rate does not exceed (None:
        never sampled)."""
        rate = self.rates.get(key)
        if rate is None:
            return None
        return next((p for p in self.cfg.pools if rate <= p.threshold), self.cfg.pools[-1])

    def weight(self, key: str) -> float:
        """The weight of a task: its pool's, or ``unseen_weight``."""
        pool = self.pool_of(key)
        return self.cfg.unseen_weight if pool is None else pool.weight

    def sample(self, n: int, rng: random.Random, split: str = "train") -> list:
        """``n`` pool tasks drawn with replacement by weight (``split`` ``eval``: the
        source's own draw)."""
        if split != "train":
            return self.tasks.sample(n, rng, split)
        weights = [self.weight(k) for k in self.keys]
        if not any(weights):
            raise ValueError("task.curriculum: every task of the pool has weight 0; give "
                             "some pool (or unseen_weight) a positive weight")
        return rng.choices(self.pool, weights=weights, k=n)

    def observe(self, tasks: Sequence, episodes: Sequence[Episode], step: int) -> None:
        """Record each task's pass rate over its block of ``episodes`` (task ``k``'s are the
        ``k``-th equal block; the policy's gradings, ``rl.actor_as_grm``, left out), as of
        ``step``."""
        episodes = [e for e in episodes if not e.meta.get("grading")]
        block = len(episodes) // max(len(tasks), 1)
        seen: dict[str, list[float]] = {}
        for k, task in enumerate(tasks):
            seen.setdefault(task_key(task), []).extend(
                e.score(self.accuracy_part) for e in episodes[k * block:(k + 1) * block])
        rates = {key: sum(v) / len(v) for key, v in seen.items() if v}
        self.rates.update(rates)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({"step": step, "rates": rates}) + "\n")

    def stats(self) -> dict[str, float]:
        """The pool's share in each difficulty pool and unseen (``curriculum/<name>``)."""
        counts = {p.name: 0 for p in self.cfg.pools} | {"unseen": 0}
        for key in self.keys:
            pool = self.pool_of(key)
            counts["unseen" if pool is None else pool.name] += 1
        return {f"curriculum/{name}": c / len(self.keys) for name, c in counts.items()}
