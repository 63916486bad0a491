"""Per-prompt token budgets (``budget: auto``): ``b_0(x)`` of ``budget_penalty`` and ``B(x)`` of
``toggle``, from each prompt's own samples."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from posttrain.algos import toggle_budget
from posttrain.types import Episode


def prompt_key(episode: Episode) -> str:
    """The prompt's identity across steps: a hash of the tokens before the first sampled one."""
    seg = episode.segments[0]
    return hashlib.sha1(str(seg.token_ids[:seg.first_sampled]).encode()).hexdigest()[:16]


class PromptBudgets:
    """``B(x) = Percentile_rho{|y| : y correct}`` (``toggle_budget``, numpy ``linear``; infinite
    without a correct sample) over the first group sampled for prompt ``x``, then fixed, as the
    spec fixes it from the initial model's samples; ``|y|`` counts trainable tokens, and ``y``
    is correct when its ``accuracy_part`` is 1. Each budget fixed is appended to ``path``
    (JSONL) and read back when a resumed run opens it: a prompt keeps its budget across a resume
    (re-fixing one after the checkpoint gives the same value, as the same samples are drawn)."""

    def __init__(self, accuracy_part: str, path: str | Path | None = None) -> None:
        self.accuracy_part, self.path = accuracy_part, None if path is None else Path(path)
        self.table: dict[str, float] = {}
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text().splitlines():
                row = json.loads(line)
                value = math.inf if row["budget"] is None else row["budget"]
                self.table.setdefault(row["key"], value)

    def budgets(self, episodes: Sequence[Episode], rho: float, step: int) -> torch.Tensor:
        """``[E]``: each episode's prompt budget at percentile ``rho``, fixing those of prompts
        seen for the first time from their samples in ``episodes``."""
        keys = [f"{rho}:{prompt_key(e)}" for e in episodes]
        new: dict[str, list[int]] = {}
        for key, e in zip(keys, episodes):
            if key in self.table:
                continue
            correct = new.setdefault(key, [])
            if e.score(self.accuracy_part) == 1:
                correct.append(sum(s.num_trainable for s in e.segments))
        for key, lengths in new.items():
            self.table[key] = toggle_budget(lengths, rho)
            self._record(key, self.table[key], step)
        return torch.tensor([self.table[k] for k in keys], dtype=torch.float64)

    def _record(self, key: str, budget: float, step: int) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"key": key, "budget": None if math.isinf(budget) else budget,
                                "step": step}) + "\n")
