"""SFT data: chat conversations from JSONL or generated from a task family, encoded as
segments with assistant-only loss masks; the batch cursor that makes the step number the data
position (batch ``k`` holds positions ``[k*B, (k+1)*B)`` of an endless stream of seeded
per-epoch permutations)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from posttrain.envs import ArithmeticTasks, EffortTask
from posttrain.models import encode_chat
from posttrain.types import Segment
from posttrain.types.errors import DataError

T = TypeVar("T")
VALID_ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class ChatData:
    """Conversations plus the line numbers of skipped malformed rows."""

    conversations: list[list[dict]]
    skipped_lines: list[int] = field(default_factory=list)


def _valid(row: object) -> list[dict]:
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise ValueError("row must be an object with a 'messages' list")
    msgs = row["messages"]
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in VALID_ROLES:
            raise ValueError(f"each message needs a role in {sorted(VALID_ROLES)}")
        if not isinstance(m.get("content"), str):
            raise ValueError("each message needs string content")
    if not any(m["role"] == "assistant" for m in msgs):
        raise ValueError("no assistant message to train on")
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def load_jsonl_rows(path: str | Path, parse: Callable[[object], T], what: str
                    ) -> tuple[list[T], list[int]]:
    """``parse`` of every non-blank line of ``path``; a line that is not JSON or that ``parse``
    rejects (``ValueError``) is skipped and its number kept. No valid row at all raises
    ``DataError``."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {str(p)!r} does not exist")
    rows: list[T] = []
    skipped: list[int] = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(parse(json.loads(line)))
            except (json.JSONDecodeError, ValueError):
                skipped.append(lineno)
    if not rows:
        lines = f": lines {skipped[:5]}{'...' if len(skipped) > 5 else ''}" if skipped else ""
        raise DataError(f"{what} file {str(p)!r} holds no valid row ({len(skipped)} malformed"
                        f"{lines})")
    return rows, skipped


def load_chat_jsonl(path: str | Path) -> ChatData:
    """Rows ``{"messages": [{"role", "content"}, ...]}``; malformed rows are skipped and their
    line numbers kept. No valid row at all raises ``DataError``."""
    return ChatData(*load_jsonl_rows(path, _valid, "SFT data"))


def generate_arithmetic_sft(
    tasks: ArithmeticTasks, n: int, error_rate: float, seed: int,
    efforts: Sequence[int] | None = None,
) -> ChatData:
    """``n`` train-split conversations, a share ``error_rate`` answered by the flawed solver;
    with ``efforts``, each prompt at a random level (a ``Reasoning Effort`` system line)."""
    rng = random.Random(f"sft:{seed}")
    conversations = []
    for p in tasks.sample(n, rng):
        conv = tasks.sft_conversation(p, error_rate, rng)
        if efforts:
            opening = len(p.messages())  # the task's messages, then the solution's turns
            conv = EffortTask(p, rng.choice(list(efforts))).messages() + conv[opening:]
        conversations.append(conv)
    return ChatData(conversations)


@lru_cache(maxsize=4)
def epoch_permutation(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    perm = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(perm)
    return tuple(perm)


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> list[int]:
    """Dataset indices of SFT batch ``step``."""
    positions = range(step * batch_size, (step + 1) * batch_size)
    return [epoch_permutation(n, seed, pos // n)[pos % n] for pos in positions]


def conversation_segment(
    tokenizer, conversation: list[dict], tools: list[dict] | None = None
) -> Segment:
    ids, mask = encode_chat(tokenizer, conversation, tools)
    return Segment(ids, mask, [0.0] * len(ids), [-1] * len(ids))


class ConversationSegments:
    """Conversation ``i`` of ``conversations`` as a ``Segment``, encoded on first use."""

    def __init__(self, tokenizer, conversations: list[list[dict]],
                 tools: list[dict] | None = None) -> None:
        self.tokenizer, self.conversations, self.tools = tokenizer, conversations, tools
        self._cache: dict[int, Segment] = {}

    def __getitem__(self, i: int) -> Segment:
        if i not in self._cache:
            self._cache[i] = conversation_segment(self.tokenizer, self.conversations[i],
                                                  self.tools)
        return self._cache[i]

    def __len__(self) -> int:
        return len(self.conversations)
