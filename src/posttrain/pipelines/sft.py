"""Supervised fine-tuning with assistant-only loss masks.

Batch ``k`` holds positions ``[k*B, (k+1)*B)`` of an endless stream of seeded per-epoch
permutations of the data, so the step number alone is the data cursor (exact resume).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache

from posttrain.models import encode_chat
from posttrain.pipelines.report import Reporter
from posttrain.pipelines.settings import SFTConfig
from posttrain.train import Trainer
from posttrain.types import Batch, Episode, Segment


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


def run_sft(
    trainer: Trainer,
    tokenizer,
    conversations: list[list[dict]],
    cfg: SFTConfig,
    reporter: Reporter,
    seed: int = 0,
    start_step: int = 0,
    on_step_end: Callable[[int], None] | None = None,
    tools: list[dict] | None = None,
) -> None:
    """Train for ``cfg.steps`` optimiser steps starting at ``start_step``; ``tools`` (schemas)
    are rendered into every conversation, as the agent loop renders them."""
    segments = ConversationSegments(tokenizer, conversations, tools)
    reporter.start("SFT", cfg.steps)
    for step in range(start_step, cfg.steps):
        idx = batch_indices(step, cfg.batch_size, len(conversations), seed)
        rows, pad = [segments[i] for i in idx], tokenizer.pad_token_id
        batch = Batch.packed(rows, cfg.pack_tokens, pad) if cfg.pack_tokens \
            else Batch.from_episodes([Episode([s]) for s in rows], pad_token_id=pad)
        metrics = trainer.sft_step(batch)
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            reporter.log("sft", step + 1, metrics)
        reporter.advance(step + 1, f"loss {metrics['loss']:.3f}")
        if on_step_end is not None:
            on_step_end(step + 1)
    reporter.finish()
