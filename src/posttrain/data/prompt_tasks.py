"""Prompts from a user's dataset as single-turn tasks (``task.name: dataset``): each row's
prompt (a string or chat messages), its reference answer and all its columns."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from posttrain.config.sections.data import DatasetConfig
from posttrain.data.chat_formats import ROLES
from posttrain.data.reading import read_rows
from posttrain.envs.base import SplitTasks
from posttrain.types.errors import DataError


@dataclass(frozen=True)
class PromptTask:
    """One row: the ``prompt`` messages the model sees, the ``reference`` verifiers check and
    the row's columns (``row``, for reward functions that ask for them)."""

    prompt: tuple[dict, ...]
    reference: str
    row: dict[str, Any] = field(compare=False)

    def messages(self) -> list[dict]:
        return [dict(m) for m in self.prompt]


def prompt_messages(value: Any) -> list[dict]:
    """A prompt cell as chat messages: a string is one user message; a list must be messages
    with a known role and string content. ``ValueError`` says what is wrong."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("the prompt is empty")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise ValueError(f"the prompt is a {type(value).__name__}, not a string or a list of "
                         "messages")
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES \
                or not isinstance(m.get("content"), str):
            raise ValueError(f"a prompt message needs a role in {ROLES} and string content, "
                             f"got {m!r}")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def prompt_task(row: dict[str, Any], cfg: DatasetConfig) -> PromptTask:
    """The task of ``row`` under ``cfg``'s column mapping; ``ValueError`` if a cell is
    unusable."""
    if row[cfg.prompt] is None:
        raise ValueError(f"its {cfg.prompt!r} cell is empty (the prompt column)")
    messages = prompt_messages(row[cfg.prompt])
    system = row[cfg.system] if cfg.system is not None else cfg.system_prompt
    if system is not None and messages[0]["role"] != "system":
        if not isinstance(system, str):
            raise ValueError(f"the system prompt is a {type(system).__name__}, not a string")
        messages.insert(0, {"role": "system", "content": system})
    reference = ""
    if cfg.answer is not None:
        answer = row[cfg.answer]
        if answer is None:
            raise ValueError(f"its {cfg.answer!r} cell is empty (the answer column; "
                             "task.data.answer=null reads no reference)")
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise ValueError(f"the answer is a {type(answer).__name__}, not text or a number")
        reference = str(answer)
    return PromptTask(tuple(messages), reference, row)


class DatasetTasks(SplitTasks):
    """The prompts of ``cfg``'s dataset in a ``train`` and an ``eval`` split (see
    ``DatasetConfig``). A row whose cells are unusable is skipped; ``skipped`` maps each
    split to the skipped rows' indices and reasons. A split without a usable row raises
    ``DataError``."""

    def __init__(self, cfg: DatasetConfig, seed: int = 0, eval_fraction: float = 0.1) -> None:
        self.skipped: dict[str, list[tuple[int, str]]] = {}
        train = self._read(cfg, cfg.path, cfg.split, seed)
        if cfg.eval_path is None and cfg.eval_split is None:
            held = self.held_out(len(train), eval_fraction)
            if held >= len(train):
                raise DataError(f"dataset {cfg.path!r}: {len(train)} usable row(s) "
                                f"({len(self.skipped['train'])} skipped) are too few to hold "
                                "any out for evaluation (set task.data.eval_path)")
            self.splits = {"train": train[:-held], "eval": train[-held:]}
            return
        source = cfg.eval_path if cfg.eval_path is not None else cfg.path
        self.splits = {"train": train,
                       "eval": self._read(cfg, source, cfg.eval_split or "train", seed, "eval")}

    def eval_set(self, n: int) -> list[PromptTask]:
        """The first ``n`` held-out prompts, or all of them when the split holds fewer (a
        user's held-out set is what it is)."""
        return self.splits["eval"][:n]

    def _read(self, cfg: DatasetConfig, path: str | list[str], split: str, seed: int,
              name: str = "train") -> list[PromptTask]:
        tasks, self.skipped[name] = read_rows(path, lambda row: prompt_task(row, cfg),
                                              "dataset", split, cfg.columns(), cfg.keeps)
        if cfg.shuffle:
            random.Random(f"{seed}:data:{name}").shuffle(tasks)
        return tasks[: cfg.max_rows]

