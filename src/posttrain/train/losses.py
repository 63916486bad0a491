"""Per-micro-batch losses built from ``algos``; every normaliser is step-global."""

from __future__ import annotations

import torch

from posttrain.algos import KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES, StepNorm
from posttrain.train.settings import LossConfig


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """Negative log-likelihood of the trainable tokens, ``token_mean`` over the step."""
    return LOSS_AGGREGATIONS.get("token_mean")(-logp, mask, norm)


def rl_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    norm: StepNorm,
    cfg: LossConfig,
    ref_logp: torch.Tensor | None = None,
    behaviour_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``agg(policy loss) + kl.coef * agg(KL) - entropy_coef * agg(H)``.

    Returns the loss and step-normalised (``token_mean``) statistics whose sums over the
    micro-batches of a step are the step's values; with ``behaviour_logp`` (the engine's), also
    ``mismatch = mean |old_logp - behaviour_logp|``, the train/inference gap.
    """
    agg = LOSS_AGGREGATIONS.get(cfg.loss_agg_mode)
    pl = cfg.policy_loss
    per_tok, stats = POLICY_LOSSES.get(pl.name)(
        logp, old_logp, advantages, eps_low=pl.eps_low, eps_high=pl.eps_high,
        dual_clip=pl.dual_clip,
    )
    pg = agg(per_tok, mask, norm)
    loss = pg
    tok_mean = LOSS_AGGREGATIONS.get("token_mean")
    out = {
        "pg_loss": pg.detach(),
        "clip_frac": tok_mean(stats["clipped"], mask, norm),
        "approx_kl": tok_mean((old_logp - logp).detach(), mask, norm),
    }
    if behaviour_logp is not None:
        out["mismatch"] = tok_mean((old_logp - behaviour_logp).abs(), mask, norm)
    if cfg.kl.coef > 0:
        if ref_logp is None:
            raise ValueError("kl.coef > 0 needs reference log-probs")
        kl = KL_ESTIMATORS.get(cfg.kl.estimator)(logp, ref_logp)
        loss = loss + cfg.kl.coef * agg(kl, mask, norm)
        out["ref_kl"] = tok_mean(kl.detach(), mask, norm)
    if entropy is not None:
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * agg(entropy, mask, norm)
        out["entropy"] = tok_mean(entropy.detach(), mask, norm)
    return loss, out
