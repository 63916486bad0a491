"""Offline knowledge distillation (ALGORITHMS.md §7) from a live teacher on chat data: the
student matches the teacher's full next-token distribution at every assistant token, with a
catalogue divergence (``forward_kl``, ``reverse_kl``, ``jsd``, ``skew_fkl``, ``skew_rkl``,
``tvd``). Batches follow SFT's cursor (``batch_indices``), so a resumed run repeats the data."""

from __future__ import annotations

from collections.abc import Callable

import torch

from posttrain.pipelines.report import Reporter
from posttrain.pipelines.sft import batch_indices, conversation_segment
from posttrain.train import Trainer
from posttrain.types import Batch, Episode

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "skew_fkl", "skew_rkl", "tvd")


def check_same_vocabulary(student_tokenizer, teacher_tokenizer) -> None:
    """Token-level distillation compares distributions over one vocabulary."""
    if student_tokenizer.get_vocab() != teacher_tokenizer.get_vocab():
        raise ValueError("teacher and student tokenizers differ: token-level distillation "
                         "needs one vocabulary (no cross-tokenizer mode is implemented)")


def run_distill(
    trainer: Trainer,
    teacher: torch.nn.Module,
    tokenizer,
    teacher_tokenizer,
    conversations: list[list[dict]],
    steps: int,
    batch_size: int,
    reporter: Reporter,
    divergence: str = "forward_kl",
    options: dict | None = None,
    seed: int = 0,
    start_step: int = 0,
    on_step_end: Callable[[int], None] | None = None,
) -> None:
    """Steps ``start_step .. steps`` of ``trainer.distill_step`` on the assistant tokens;
    the teacher's tokenizer must be the student's."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence {divergence!r}; offline distillation takes "
                         f"{', '.join(DIVERGENCES)}")
    check_same_vocabulary(tokenizer, teacher_tokenizer)
    teacher.eval()
    reporter.start(f"distill ({divergence})", steps)
    for step in range(start_step, steps):
        idx = batch_indices(step, batch_size, len(conversations), seed)
        batch = Batch.from_episodes(
            [Episode([conversation_segment(tokenizer, conversations[i])]) for i in idx],
            pad_token_id=tokenizer.pad_token_id)
        metrics = trainer.distill_step(batch, teacher, divergence, options or {})
        reporter.log("distill", step + 1, metrics)
        reporter.advance(step + 1, f"{divergence} {metrics['divergence']:.4f}")
        if on_step_end is not None:
            on_step_end(step + 1)
    reporter.finish()
