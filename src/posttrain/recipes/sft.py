"""Supervised fine-tuning with assistant-only loss masks.

Batch ``k`` holds positions ``[k*B, (k+1)*B)`` of an endless stream of seeded per-epoch
permutations of the data, so the step number alone is the data cursor (exact resume).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from posttrain.config import SFTConfig
from posttrain.data.conversations import ChatData, ConversationSegments, batch_indices
from posttrain.engines import Engine
from posttrain.recipes.build import RunParts
from posttrain.recipes.sampling_loop import due
from posttrain.reporting import Reporter
from posttrain.train import Trainer, sft_step
from posttrain.types import Batch, Episode


def run_sft(trainer: Trainer, tokenizer, data: ChatData, cfg: SFTConfig, reporter: Reporter,
            seed: int = 0, start_step: int = 0,
            on_step_end: Callable[[int], None] | None = None) -> None:
    """Train for ``cfg.steps`` optimiser steps starting at ``start_step`` on ``data``'s
    conversations, each rendered with its tools, as the agent loop renders them."""
    segments = ConversationSegments(tokenizer, data.conversations, data.tools)
    reporter.start("SFT", cfg.steps, start_step)
    for step in range(start_step, cfg.steps):
        idx = batch_indices(step, cfg.batch_size, len(segments), seed)
        rows, pad = [segments[i] for i in idx], tokenizer.pad_token_id
        batch = Batch.packed(rows, cfg.pack_tokens, pad) if cfg.pack_tokens \
            else Batch.from_episodes([Episode([s]) for s in rows], pad_token_id=pad)
        metrics = trainer.apply(sft_step, batch)
        if due(cfg.log_every, step, cfg.steps):
            reporter.log("sft", step + 1, metrics)
        reporter.advance(step + 1, f"loss {metrics['loss']:.3f}")
        if on_step_end is not None:
            on_step_end(step + 1)
    reporter.finish()


def sft_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None, evals: dict):
    """The ``sft`` stage; returns the trained model with whole weights."""
    cfg = parts.cfg
    trainer = Trainer(model, cfg.sft.optim, cfg.sft.steps, cfg.trainer,
                      addons=parts.trainer_addons(model))
    data = parts.conversations(cfg.sft.data, cfg.sft.num_examples, cfg.sft.error_rate, "SFT",
                               sft=True)
    data.check(tokenizer)  # before training
    run_sft(trainer, tokenizer, data, cfg.sft, parts.reporter, cfg.seed,
            parts.resume(ckpt, trainer), parts.checkpointer(trainer, tokenizer, "sft", evals))
    return trainer.export_model()
