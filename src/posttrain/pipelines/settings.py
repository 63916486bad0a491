"""Validated settings of the SFT, RL and evaluation loops."""

from __future__ import annotations

from pydantic import Field

from posttrain.train import LossConfig, OptimConfig, Section


class EvalConfig(Section):
    """Held-out evaluation: ``temperature == 0`` is greedy (one sample a problem)."""

    num_problems: int = Field(200, ge=1)
    temperature: float = Field(0.0, ge=0)
    max_new_tokens: int = Field(32, ge=1)


class SFTConfig(Section):
    """Supervised fine-tuning on chat data (``data`` JSONL of ``{"messages": [...]}`` rows, or
    generated from the task with ``error_rate`` of flawed answers when ``data`` is null)."""

    steps: int = Field(500, ge=0)
    batch_size: int = Field(64, ge=1)
    data: str | None = None
    num_examples: int = Field(20000, ge=1)
    error_rate: float = Field(0.6, ge=0, le=1)
    optim: OptimConfig = OptimConfig(lr=3e-3, warmup_steps=30)
    log_every: int = Field(10, ge=1)


class RLConfig(Section):
    """Synchronous GRPO-style RL: ``prompts_per_step`` prompts x ``group_size`` samples."""

    steps: int = Field(60, ge=0)
    prompts_per_step: int = Field(16, ge=1)
    group_size: int = Field(8, ge=1)
    max_new_tokens: int = Field(32, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    epochs: int = Field(1, ge=1)
    mini_batches: int = Field(1, ge=1)
    eval_every: int = Field(20, ge=0)
    mismatch_tolerance: float = Field(0.05, gt=0)
    loss: LossConfig = LossConfig()
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant")
