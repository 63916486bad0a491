"""KL estimators (ALGORITHMS.md §4), per token, with ``delta = ref_logp - logp``."""

from __future__ import annotations

import torch

from posttrain.algos.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL = -delta = logp - ref_logp``."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL = delta^2 / 2``."""
    return 0.5 * (ref_logp - logp) ** 2


@KL_ESTIMATORS.register("k3", "low_var_kl")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL = exp(delta) - delta - 1 >= 0`` (Schulman's low-variance estimator)."""
    delta = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.exp(delta) - delta - 1
