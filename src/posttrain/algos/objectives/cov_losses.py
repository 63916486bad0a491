"""Covariance-selected policy losses (issue 39; "The Entropy Mechanism of Reinforcement
Learning for Reasoning Language Models", arXiv 2505.22617; verl's ``clip_cov`` / ``kl_cov``):
entropy collapses through the tokens whose log-probability and advantage covary most, so a
few of those are held back.

``Cov_t = (A_t - mean A)(log pi_t - mean log pi)``, the means over the micro-batch's ``N``
valid tokens (log-probs detached). Both return the per-token loss ``[B, T]`` and statistics.
"""

from __future__ import annotations

import hashlib

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import importance_ratio, require_finite


def token_covariance(logp: torch.Tensor, advantages: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """``Cov_t`` on every token (the module's docstring); 0 off the mask."""
    valid = mask > 0
    n = valid.sum().clamp(min=1)
    lp, adv = logp.detach(), advantages.detach()
    mean_lp, mean_adv = (lp * valid).sum() / n, (adv * valid).sum() / n
    return (adv - mean_adv) * (lp - mean_lp) * valid


def batch_generator(*tensors: torch.Tensor) -> torch.Generator:
    """A generator seeded from the bytes of ``tensors``: the same batch draws the same (a
    resumed run repeats the straight one), another batch draws afresh."""
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(t.detach().to("cpu", torch.float64).numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest()[:8], "big"))


def selected_count(ratio: float, n_valid: int) -> int:
    """``max(1, floor(ratio N))`` tokens (none when ``N = 0``)."""
    return min(n_valid, max(1, int(ratio * n_valid))) if n_valid else 0


@register("policy_loss", "clip_cov",
          source=("Clip-Cov: Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', "
                  "arXiv 2505.22617; verl"))
def clip_cov(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    eps_low: float = 0.2, eps_high: float = 0.2, cov_ratio: float = 2e-4, cov_low: float = 1.0,
    cov_high: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = -min(rho_t A_t, clip(rho_t, 1-eps_low, 1+eps_high) A_t)``, except on
    ``max(1, floor(cov_ratio N))`` tokens drawn at random among the unclipped ones with
    ``cov_low < Cov_t < cov_high``, whose loss is 0 (no gradient). Stats: ``clipped`` (the
    ratio left its band, or the token was held back) and ``ratio``."""
    require_finite("clip_cov", logp=logp, old_logp=old_logp, advantages=advantages)
    rho = importance_ratio(logp, old_logp)
    plain, bounded = -advantages * rho, -advantages * rho.clamp(1 - eps_low, 1 + eps_high)
    clipped_by_ppo = (bounded > plain) & (mask > 0)
    cov = token_covariance(logp, advantages, mask)
    candidates = torch.nonzero((cov > cov_low) & (cov < cov_high) & (mask > 0)
                               & ~clipped_by_ppo)
    k = min(len(candidates), selected_count(cov_ratio, int((mask > 0).sum())))
    keep = torch.ones_like(logp)
    if k:
        draw = torch.randperm(len(candidates), generator=batch_generator(old_logp, advantages))
        held = candidates[draw[:k]]
        keep[held[:, 0], held[:, 1]] = 0.0
    clipped = (((rho < 1 - eps_low) | (rho > 1 + eps_high)) | (keep == 0)).to(logp.dtype)
    return torch.maximum(plain, bounded) * keep, {"clipped": clipped.detach(),
                                                  "ratio": rho.detach()}


@register("policy_loss", "kl_cov",
          source=("KL-Cov: Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', "
                  "arXiv 2505.22617; verl"))
def kl_cov(
    *, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    cov_ratio: float = 2e-4, kl_coef: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped ``L_t = -rho_t A_t``, plus ``kl_coef |log pi_t - log pi_old,t|`` on the
    ``max(1, floor(cov_ratio N))`` tokens of largest ``Cov_t``. Stats: ``clipped`` (the
    penalised tokens) and ``ratio``."""
    require_finite("kl_cov", logp=logp, old_logp=old_logp, advantages=advantages)
    rho = importance_ratio(logp, old_logp)
    loss = -advantages * rho
    valid = mask > 0
    k = selected_count(cov_ratio, int(valid.sum()))
    penalised = torch.zeros_like(logp)
    if k:
        cov = token_covariance(logp, advantages, mask).masked_fill(~valid, -torch.inf)
        top = torch.topk(cov.flatten(), k).indices
        penalised.view(-1)[top] = 1.0
    loss = loss + penalised * kl_coef * (logp - old_logp).abs()
    return loss, {"clipped": penalised.detach(), "ratio": rho.detach()}
