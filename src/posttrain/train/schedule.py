"""Optimiser and learning-rate schedule."""

from __future__ import annotations

import math

import torch

from posttrain.settings import OptimConfig


def lr_factor(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Multiplier of ``cfg.lr`` at optimiser step ``step`` (0-based).

    Warmup: ``(step + 1) / warmup_steps``. Then cosine from 1 to ``min_lr_ratio`` over the
    remaining steps (``constant`` keeps 1).
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total_steps, cfg))
    return opt, sched
