"""Ratio-bounded policy losses (docs/algorithms.md): ``ppo_clip``, ``gspo``, ``ecpo``, ``gbpo``,
``sapo``. Each returns the per-token loss ``[B, T]`` (to minimise) and per-token statistics
(``clipped``: the ratio left its trust region); aggregation happens elsewhere."""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import importance_ratio


@register("policy_loss", "ppo_clip",
          source=("PPO: Schulman et al. 2017, arXiv 1707.06347; clip-higher: DAPO (Yu et al. "
                  "2025, arXiv 2503.14476); dual-clip: Ye et al. 2019, arXiv 1912.09729"))
def ppo_clip(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float = 0.2,
    eps_high: float = 0.2, dual_clip: float | None = None,
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


@register("policy_loss", "gspo", source="GSPO: Zheng et al. (Qwen) 2025, arXiv 2507.18071")
def gspo(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    eps_low: float = 3e-4, eps_high: float = 4e-4, token_level: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sequence ratio ``s_i = exp(mean_t log rho_it)``; ``L_i = -min(s_i A_i, clip(s_i, 1 -
    eps_low, 1 + eps_high) A_i)`` on every token. Token variant: ``s_it = sg(s_i) pi / sg(pi)``.
    Aggregate with ``seq_mean_token_mean``."""
    n = mask.sum(dim=1).clamp(min=1)
    log_s = ((logp - old_logp) * mask).sum(dim=1) / n
    seq_adv = (advantages * mask).sum(dim=1) / n
    s = torch.exp(log_s.clamp(-20, 20))[:, None]
    if token_level:
        s = s.detach() * torch.exp(logp - logp.detach())
    s = s.expand_as(logp)
    adv = seq_adv[:, None].expand_as(logp)
    obj = torch.minimum(s * adv, torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv)
    clipped = ((s < 1 - eps_low) | (s > 1 + eps_high)).to(logp.dtype)
    return -obj * mask, {"clipped": clipped.detach(), "ratio": s.detach()}


@register("policy_loss", "ecpo",
          source="ECPO: OneRec Team (Kuaishou) 2025, 'OneRec Technical Report', arXiv 2506.13695")
def ecpo(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps: float = 0.2,
    delta: float = 0.1,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``ppo_clip`` against ``pi'_old = max(sg(pi) / (1 + eps + delta), pi_old)``: the gradient
    magnitude is at most ``(1 + eps + delta) |A| |grad log pi|``."""
    if delta <= 0:
        raise ValueError(f"ecpo: delta must be > 0, got {delta}")
    floor = logp.detach() - torch.log1p(torch.as_tensor(eps + delta, dtype=logp.dtype))
    return ppo_clip(logp=logp, old_logp=torch.maximum(floor, old_logp), advantages=advantages,
                    eps_low=eps, eps_high=eps)


@register("policy_loss", "gbpo",
          source=("GBPO: Zhou et al. (Kuaishou) 2025, 'OneRec-V2 Technical Report', "
                  "arXiv 2508.20900"))
def gbpo(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-free and bounded: ``o = pi / pi'_old A`` with ``pi'_old = max(pi_old, sg pi)`` if
    ``A >= 0`` and ``max(pi_old, 1 - sg pi)`` if ``A < 0`` (probabilities, per token)."""
    pi, pi_old = logp.exp(), old_logp.exp()
    bound = torch.where(advantages >= 0, pi.detach(), 1 - pi.detach())
    return -(pi / torch.maximum(pi_old, bound)) * advantages, {"ratio": (pi / pi_old).detach()}


@register("policy_loss", "sapo",
          source="SAPO: Gao et al. (Qwen) 2025, arXiv 2511.20347; verl, TRL, AReaL")
def sapo(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Soft gate instead of a hard clip: ``f(rho) = sigmoid(tau (rho - 1)) 4 / tau``,
    ``L = -f(rho) A``, ``tau = tau_pos`` if ``A > 0`` else ``tau_neg``. Aggregate with
    ``seq_mean_token_mean``."""
    rho = importance_ratio(logp, old_logp)
    # the taus as tensors of logp's dtype: two Python floats make a float32 where()
    # (tau_neg=1.05 would be 1.0499999523 in a float64 run)
    tau = torch.where(advantages > 0, logp.new_tensor(tau_pos), logp.new_tensor(tau_neg))
    gate = torch.sigmoid(tau * (rho - 1)) * 4 / tau
    return -gate * advantages, {"ratio": rho.detach()}
