"""Helpers shared by the catalogue's functions: finiteness checks and group statistics."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import torch

EPS = 1e-6
LOG_RATIO_CLAMP = 20.0


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """``rho = exp(clamp(logp - old_logp, -20, 20))``."""
    return torch.exp(torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def require_finite(where: str, **tensors: torch.Tensor | None) -> None:
    """Raise ``ValueError`` naming the first input holding NaN or inf (NaN never propagates)."""
    for name, t in tensors.items():
        if t is not None and not bool(torch.isfinite(torch.as_tensor(t)).all()):
            raise ValueError(f"{where}: {name} holds NaN or inf")


def group_stats(
    values: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, unbiased std (ddof=1; 0 for size-1 groups) and group size of
    ``values [B]`` (or ``[B, K]``, per column)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    g = int(inverse.max()) + 1
    shape = (g, *values.shape[1:])
    size = values.new_zeros(shape).index_add_(0, inverse, torch.ones_like(values))
    mean = values.new_zeros(shape).index_add_(0, inverse, values) / size
    dev2 = (values - mean[inverse]) ** 2
    ss = values.new_zeros(shape).index_add_(0, inverse, dev2)
    std = torch.where(size > 1, (ss / (size - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    return mean[inverse], std[inverse], size[inverse]


def normalise(values: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, eps: float = EPS):
    """``(x - mean) / (std + eps)``, and 0 where ``std == 0`` (single rows, constant groups)."""
    out = (values - mean) / (std + eps)
    return torch.where(std > 0, out, torch.zeros_like(out))


def per_token(seq_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast ``[B]`` values over the loss mask: ``A_it = A_i m_it``."""
    return seq_values.to(mask.dtype)[:, None] * mask


def group_index(keys: Iterable[Hashable]) -> torch.Tensor:
    """``[N]`` long: each key's group, groups numbered in order of first appearance (what the
    catalogue's ``group_ids`` inputs hold)."""
    index: dict[Hashable, int] = {}
    return torch.tensor([index.setdefault(k, len(index)) for k in keys], dtype=torch.long)
