"""Policy losses (ALGORITHMS.md §2). Each returns per-token loss ``[B, T]`` (to minimise) and
per-token statistics; aggregation (§3) happens elsewhere."""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import importance_ratio


@register("policy_loss", "ppo_clip", source="S21, S15, S20; dual-clip (standard)")
def ppo_clip(
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO/GRPO/DAPO clipped surrogate with decoupled bounds.

    ``o = min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A)``; dual-clip (``c > 1``, only where
    ``A < 0``): ``o = max(o, c*A)``. Loss ``L = -o``. Stats: ``clipped`` (rho outside the band).
    """
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    rho = importance_ratio(logp, old_logp)
    clipped_rho = torch.clamp(rho, 1 - eps_low, 1 + eps_high)
    obj = torch.minimum(rho * advantages, clipped_rho * advantages)
    if dual_clip is not None:
        obj = torch.where(advantages < 0, torch.maximum(obj, dual_clip * advantages), obj)
    clipped = ((rho < 1 - eps_low) | (rho > 1 + eps_high)).to(logp.dtype)
    return -obj, {"clipped": clipped.detach(), "ratio": rho.detach()}
