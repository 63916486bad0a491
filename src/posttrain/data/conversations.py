"""SFT data: chat conversations from a dataset or generated from a task family, encoded as
segments with assistant-only loss masks; the batch cursor that makes the step number the data
position (batch ``k`` holds positions ``[k*B, (k+1)*B)`` of an endless stream of seeded
per-epoch permutations)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from posttrain.data.chat_formats import conversation
from posttrain.data.reading import read_rows
from posttrain.envs import ArithmeticTasks, Task
from posttrain.models import encode_chat
from posttrain.models.quick_tokens import QUICK_ROLE, quick_token_ids
from posttrain.types import Segment


@dataclass
class ChatData:
    """Conversations, the tool schemas of each (None: none) and the skipped rows (index,
    reason)."""

    conversations: list[list[dict]]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    tools: list[list[dict] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tools = self.tools or [None] * len(self.conversations)

    def check(self, tokenizer) -> None:
        """Raise before training what encoding would later: a quick instruction the data
        trains whose token ``tokenizer`` lacks (``MissingQuickTokens``)."""
        quick_token_ids(tokenizer, quick_instructions(self))


def load_chat_data(path: str | Path) -> ChatData:
    """The conversations of the dataset at ``path`` (any format ``datasets`` reads; rows in
    the OpenAI, ShareGPT or TRL prompt/completion form, ``data.chat_formats``), and one per
    quick-instruction answer a row has. Unusable rows are skipped with their reasons; none
    usable raises ``DataError``."""
    rows, skipped = read_rows(path, conversation, "SFT data")
    data = ChatData([], skipped, [])
    for c in rows:
        whole = [c.messages] if any(m["role"] == "assistant" for m in c.messages) else []
        for messages in whole + c.quick_examples():
            data.conversations.append(messages)
            data.tools.append(c.tools)
    return data


def quick_instructions(data: ChatData) -> list[str]:
    """The quick instructions ``data`` trains, in order of first use."""
    return list(dict.fromkeys(c[-1]["name"] for c in data.conversations
                              if c[-1]["role"] == QUICK_ROLE))


def generate_arithmetic_sft(
    tasks: ArithmeticTasks, n: int, error_rate: float, seed: int,
    variants: Sequence[Callable[[Task], Task]] = (),
    then: Callable[[Any, list[dict], random.Random], list[dict]] | None = None,
) -> ChatData:
    """``n`` train-split conversations, a share ``error_rate`` answered by the flawed solver;
    with ``variants`` (the forms a prompt is asked in), each prompt in one drawn at random;
    ``then(task, conversation, rng)``: turns to append to each. A task source with
    ``conversation_tools(conversation)`` gives each its own tool schemas (else the run's tools
    are shown)."""
    rng = random.Random(f"sft:{seed}")
    conversations = []
    for p in tasks.sample(n, rng):
        conv = tasks.sft_conversation(p, error_rate, rng)
        if variants:
            opening = len(p.messages())  # the task's messages, then the solution's turns
            conv = rng.choice(variants)(p).messages() + conv[opening:]
        if then is not None:
            conv = conv + then(p, conv, rng)
        conversations.append(conv)
    tools_of = getattr(tasks, "conversation_tools", None)  # tasks whose agents differ
    return ChatData(conversations, tools=[tools_of(c) for c in conversations] if tools_of
                    else [])


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
    """Conversation ``i`` of ``conversations`` as a ``Segment``, encoded on first use with
    ``tools[i]`` (tool schemas or None)."""

    def __init__(self, tokenizer, conversations: list[list[dict]],
                 tools: Sequence[list[dict] | None] | None = None) -> None:
        self.tokenizer, self.conversations = tokenizer, conversations
        self.tools = tools or [None] * len(conversations)
        self._cache: dict[int, Segment] = {}

    def __getitem__(self, i: int) -> Segment:
        if i not in self._cache:
            self._cache[i] = conversation_segment(self.tokenizer, self.conversations[i],
                                                  self.tools[i])
        return self._cache[i]

    def __len__(self) -> int:
        return len(self.conversations)
