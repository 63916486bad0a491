"""Advantage estimators (ALGORITHMS.md §1). Output ``adv [B, T]``, zero where ``mask == 0``."""

from __future__ import annotations

import torch

from posttrain.algos.registry import Registry

ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")


def group_stats(values: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-row group mean, unbiased std (ddof=1; 0 for size-1 groups) and group size."""
    g = int(group_index.max().item()) + 1
    size = torch.zeros(g, dtype=values.dtype).index_add_(0, group_index, torch.ones_like(values))
    total = torch.zeros(g, dtype=values.dtype).index_add_(0, group_index, values)
    mean = total / size
    dev2 = (values - mean[group_index]) ** 2
    ss = torch.zeros(g, dtype=values.dtype).index_add_(0, group_index, dev2)
    std = torch.where(size > 1, (ss / (size - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    return mean[group_index], std[group_index], size[group_index]


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-normalised outcome advantage: ``A_i = (r_i - mean_g) / (std_g + eps)``.

    Std is unbiased (ddof=1). A group of size 1, or whose rewards are all equal, gives 0.
    A NaN reward raises ``ValueError``.
    """
    if torch.isnan(rewards).any():
        raise ValueError("grpo: a reward is NaN")
    r = rewards.to(torch.float64)
    mean, std, size = group_stats(r, group_index)
    adv = (r - mean) / (std + eps)
    adv = torch.where((size > 1) & (std > 0), adv, torch.zeros_like(adv))
    return (adv.to(mask.dtype)[:, None] * mask)
