"""Importance-weighted policy gradients (docs/algorithms.md): ``reinforce``, ``cispo``,
``mimo_is_pg``, ``kimi_k25``. The gradient flows through ``logp`` (and, for ``kimi_k25`` as
written, through the clipped ratio)."""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import importance_ratio


@register("policy_loss", "reinforce",
          source=("REINFORCE: Williams 1992, 'Simple Statistical Gradient-Following Algorithms "
                  "for Connectionist RL', Machine Learning 8"))
def reinforce(
    *, logp: torch.Tensor, advantages: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = -A_t logp_t``: the on-policy gradient of ``rho A`` at ``rho = 1``."""
    return -advantages * logp, {}


@register("policy_loss", "cispo",
          source=("CISPO: MiniMax-M1 (MiniMax 2025, arXiv 2506.13585); ScaleRL (Khatri et al. "
                  "2025, arXiv 2510.13786), TRL"))
def cispo(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, r_min: float = 0.0,
    r_max: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = -sg(clip(rho_t, r_min, r_max)) A_t logp_t``: clipped IS weight, every token keeps
    a gradient through ``log pi``."""
    rho = importance_ratio(logp, old_logp).detach()
    clipped = ((rho < r_min) | (rho > r_max)).to(logp.dtype)
    return -rho.clamp(r_min, r_max) * advantages * logp, {"clipped": clipped, "ratio": rho}


@register("policy_loss", "mimo_is_pg",
          source=("Xiaomi MiMo-V2.6 post-training report, 2026; MiMo-V2-Flash (Xiaomi 2026, "
                  "arXiv 2601.02780)"))
def mimo_is_pg(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, is_low: float = 0.5,
    is_high: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = -w_t M_t A_t logp_t`` with ``w = sg(pi / mu)`` (``old_logp`` = the sampler's
    log-probs) and ``M = 1[is_low <= w <= is_high]``; aggregate with ``token_mean``, so masked
    tokens still count in the normaliser."""
    w = importance_ratio(logp, old_logp).detach()
    keep = (w >= is_low) & (w <= is_high)
    return -(w * keep) * advantages * logp, {"clipped": (~keep).to(logp.dtype), "ratio": w}


@register("policy_loss", "kimi_k25", source="Kimi K2.5 (Kimi Team 2026, arXiv 2602.02276)")
def kimi_k25(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, alpha: float,
    beta: float, tau: float, detach_clip: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``o = clip(rho, alpha, beta) A - tau (log rho)^2``, ``L = -o``; the clip is not detached
    (no gradient outside ``[alpha, beta]``). ``detach_clip``: ``sg(clip(rho)) A logp`` instead
    (CISPO-like). Aggregate with ``token_mean``."""
    if not 0 < alpha < 1 < beta:
        raise ValueError(f"kimi_k25: need 0 < alpha < 1 < beta, got {alpha}, {beta}")
    log_rho = (logp - old_logp).clamp(-20, 20)
    rho = log_rho.exp()
    clip = rho.clamp(alpha, beta)
    surrogate = clip.detach() * advantages * logp if detach_clip else clip * advantages
    clipped = ((rho < alpha) | (rho > beta)).to(logp.dtype)
    return -(surrogate - tau * log_rho**2), {"clipped": clipped.detach(), "ratio": rho.detach()}
