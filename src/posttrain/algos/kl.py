"""KL estimators (docs/algorithms.md), per token, with ``delta = ref_logp - logp``.

Where the estimate goes (``in_reward`` with old log-probs, or ``in_loss`` with the current
ones) is the caller's choice; the gradient-bias table of Shah et al. (arXiv 2512.21852) is
tested in tests/unit/test_kl.py.
"""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import LOG_RATIO_CLAMP, importance_ratio, require_finite


def _delta(where: str, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    require_finite(where, logp=logp, ref_logp=ref_logp)
    return torch.clamp(ref_logp - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@register("kl", "k1", aliases=("kl",),
          source=("Schulman, 'Approximating KL Divergence' (blog, 2020); Shah et al. 2025, 'A "
                  "Comedy of Estimators', arXiv 2512.21852"))
def k1(*, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL_t = -delta = logp - ref_logp``."""
    require_finite("k1", logp=logp, ref_logp=ref_logp)
    return logp - ref_logp


@register("kl", "k2", aliases=("mse",),
          source=("Schulman, 'Approximating KL Divergence' (blog, 2020); Shah et al. 2025, 'A "
                  "Comedy of Estimators', arXiv 2512.21852"))
def k2(*, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL_t = delta^2 / 2``."""
    return 0.5 * _delta("k2", logp, ref_logp) ** 2


@register("kl", "k3", aliases=("low_var_kl",),
          source=("Schulman, 'Approximating KL Divergence' (blog, 2020); Shah et al. 2025, 'A "
                  "Comedy of Estimators', arXiv 2512.21852; GRPO (arXiv 2402.03300)"))
def k3(*, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``KL_t = exp(delta) - delta - 1 >= 0`` (Schulman's low-variance estimator)."""
    delta = _delta("k3", logp, ref_logp)
    return torch.exp(delta) - delta - 1


@register("kl", "is_k3", aliases=("unbiased_kl", "use_bias_correction_kl"),
          source="DeepSeek-V3.2 (DeepSeek-AI 2025, arXiv 2512.02556)")
def is_k3(*, logp: torch.Tensor, ref_logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """``KL_t = rho_old (exp(delta) - delta - 1)`` with ``rho_old = pi / pi_old`` keeping its
    gradient: unbiased per token when tokens were sampled from ``pi_old``."""
    require_finite("is_k3", old_logp=old_logp)
    return importance_ratio(logp, old_logp) * k3(logp=logp, ref_logp=ref_logp)


def adaptive_kl_coef(coef: float, measured_kl: float, target: float) -> float:
    """PPO's adaptive penalty: halve ``coef`` if the measured KL is below ``target / 1.5``,
    double it above ``1.5 * target``, else keep it (a ``delta / 1.5`` on both branches, as some
    notes write it, is a typo)."""
    if measured_kl < target / 1.5:
        return coef / 2
    if measured_kl > 1.5 * target:
        return coef * 2
    return coef
