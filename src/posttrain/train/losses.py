"""Per-micro-batch losses built from ``algos``; every normaliser is step-global."""

from __future__ import annotations

import inspect

import torch

from posttrain.algos import StepNorm, get
from posttrain.train.settings import LossConfig


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """Negative log-likelihood of the trainable tokens, ``token_mean`` over the step."""
    return get("aggregation", "token_mean")(loss=-logp, mask=mask, norm=norm)


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
    aggregate = get("aggregation", cfg.loss_agg_mode)
    token_mean = get("aggregation", "token_mean")

    def agg(values: torch.Tensor) -> torch.Tensor:
        return aggregate(loss=values, mask=mask, norm=norm)

    def mean(values: torch.Tensor) -> torch.Tensor:
        return token_mean(loss=values.detach(), mask=mask, norm=norm)

    policy_loss = get("policy_loss", cfg.policy_loss.name)
    inputs = {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask}
    wanted = inspect.signature(policy_loss).parameters
    per_tok, stats = policy_loss(
        **{k: v for k, v in inputs.items() if k in wanted}, **cfg.policy_loss.hyperparameters()
    )
    pg = agg(per_tok)
    loss = pg
    out = {"pg_loss": pg.detach(), "approx_kl": mean(old_logp - logp)}
    if "clipped" in stats:
        out["clip_frac"] = mean(stats["clipped"])
    if behaviour_logp is not None:
        out["mismatch"] = mean((old_logp - behaviour_logp).abs())
    if cfg.kl.coef > 0:
        if ref_logp is None:
            raise ValueError("kl.coef > 0 needs reference log-probs")
        extra = {"old_logp": old_logp} if cfg.kl.estimator == "is_k3" else {}
        kl = get("kl", cfg.kl.estimator)(logp=logp, ref_logp=ref_logp, **extra)
        loss = loss + cfg.kl.coef * agg(kl)
        out["ref_kl"] = mean(kl)
    if entropy is not None:
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * agg(entropy)
        out["entropy"] = mean(entropy)
    return loss, out
