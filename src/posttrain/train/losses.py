"""Per-micro-batch losses built from ``algos``; every normaliser is step-global."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posttrain.algos import StepNorm, entry, get
from posttrain.settings import ActorConfig, KLConfig, OffPolicyConfig


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """Negative log-likelihood of the trainable tokens, ``token_mean`` over the step."""
    return get("aggregation", "token_mean")(loss=-logp, mask=mask, norm=norm)


@dataclass
class RLTokens:
    """One micro-batch's per-token tensors ``[B, T]``: current log-probs (with gradient) and
    entropy, and the fixed ones the loss compares them with."""

    logp: torch.Tensor
    entropy: torch.Tensor | None
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    behaviour_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None


def _policy_term(t: RLTokens, mask: torch.Tensor, actor: ActorConfig,
                 options: Mapping[str, Any] | None):
    inputs = {"logp": t.logp, "old_logp": t.old_logp, "advantages": t.advantages, "mask": mask}
    return entry("policy_loss", actor.policy_loss.name).call(
        inputs, **(actor.policy_loss.hyperparameters() if options is None else options))


def rl_loss(
    t: RLTokens,
    norm: StepNorm,
    actor: ActorConfig,
    kl: KLConfig | None = None,
    offpolicy: OffPolicyConfig | None = None,
    entropy_coef: float = 0.0,
    loss_options: Mapping[str, Any] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``agg(w * policy loss) + [kl in loss] coef agg(KL) - entropy_coef agg(H)``, the policy
    loss with ``loss_options`` (None: ``actor.policy_loss``'s hyperparameters).

    ``w`` is the off-policy correction weight (1 without one); ``opsm`` removes drifted
    negative sequences from the policy term. Returns the loss and step-normalised
    (``token_mean``) statistics whose sums over the micro-batches of a step are the step's
    values; with behaviour log-probs, ``mismatch = mean |old_logp - behaviour_logp|``.
    """
    aggregate = get("aggregation", actor.loss_agg_mode)
    token_mean = get("aggregation", "token_mean")
    mask = t.mask

    def agg(values: torch.Tensor, m: torch.Tensor = mask) -> torch.Tensor:
        return aggregate(loss=values, mask=m, norm=norm)

    def mean(values: torch.Tensor) -> torch.Tensor:
        return token_mean(loss=values.detach(), mask=mask, norm=norm)

    policy_mask = mask
    weight = torch.ones_like(t.logp)
    if offpolicy is not None and t.behaviour_logp is not None:
        if offpolicy.opsm_delta is not None:
            policy_mask = get("offpolicy", "opsm")(
                behaviour_logp=t.behaviour_logp, logp=t.logp, advantages=t.advantages,
                mask=mask, delta=offpolicy.opsm_delta)
        if offpolicy.correction is not None:
            weight = get("offpolicy", offpolicy.correction)(
                old_logp=t.old_logp, behaviour_logp=t.behaviour_logp, mask=mask,
                **offpolicy.weight_options())
    per_tok, stats = _policy_term(t, policy_mask, actor, loss_options)
    pg = agg(weight * per_tok, policy_mask)
    loss = pg
    out = {"pg_loss": pg.detach(), "approx_kl": mean(t.old_logp - t.logp)}
    if "clipped" in stats:
        out["clip_frac"] = mean(stats["clipped"])
    if t.behaviour_logp is not None:
        out["mismatch"] = mean((t.old_logp - t.behaviour_logp).abs())
    if offpolicy is not None and offpolicy.correction is not None:
        out["is_weight"] = mean(weight)
    if kl is not None and kl.coef > 0 and kl.placement == "in_loss":
        if t.ref_logp is None:
            raise ValueError("kl.coef > 0 needs reference log-probs")
        kl_t = entry("kl", kl.estimator).call(
            {"logp": t.logp, "ref_logp": t.ref_logp, "old_logp": t.old_logp})
        loss = loss + kl.coef * agg(kl_t)
        out["ref_kl"] = mean(kl_t)
    if t.entropy is not None:
        if entropy_coef > 0:
            bonus, _ = get("policy_loss", "entropy_bonus")(entropy=t.entropy, coef=entropy_coef)
            loss = loss + agg(bonus)
        out["entropy"] = mean(t.entropy)
    return loss, out


def preference_loss(
    name: str, options: dict, logp: torch.Tensor, mask: torch.Tensor,
    ref_logp: torch.Tensor | None, pairs: int, reference_point: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rows ``2i, 2i + 1`` of the per-token ``[B, T]`` tensors are pair ``i``'s chosen and
    rejected responses. ``ell`` = summed log-probs over ``mask``; the catalogue's preference loss
    ``name`` takes what it needs of them (sums, references, lengths, token means). ``kto`` sees
    the rows unpaired — chosen desirable, rejected undesirable, around ``reference_point`` — and
    averages over rows. Returns the loss summed over the pairs / ``pairs`` (the step's pair
    count) and step-normalised statistics: ``reward_accuracy`` and ``reward_margin`` of the
    implicit reward ``ell - ell_ref`` (``ell / |y|`` for reference-free losses)."""
    lengths = mask.sum(dim=1)
    if bool((lengths == 0).any()):
        raise ValueError("a preference response has no trainable token")
    ell = (logp * mask).sum(dim=1)
    ref = None if ref_logp is None else (ref_logp * mask).sum(dim=1)
    inputs = {"logp": ell, "ref_logp": ref, "reference_point": reference_point,
              "desirable": torch.arange(len(ell)) % 2 == 0,
              "chosen_logp": ell[0::2], "rejected_logp": ell[1::2],
              "chosen_length": lengths[0::2], "rejected_length": lengths[1::2],
              "chosen_mean_logp": ell[0::2] / lengths[0::2],
              "rejected_mean_logp": ell[1::2] / lengths[1::2]}
    if ref is not None:
        inputs |= {"ref_chosen_logp": ref[0::2], "ref_rejected_logp": ref[1::2]}
    loss = entry("preference", name)
    if ref is None and any(k.startswith("ref_") for k in loss.inputs().values()):
        raise ValueError(f"preference loss {name!r} needs reference log-probs")
    per_item = loss.call(inputs, **options)
    unpaired = loss.takes("desirable")  # one loss a row: a pair's is the mean of its two rows
    per_pair = per_item.view(-1, 2).mean(dim=1) if unpaired else per_item
    reward = (ell - ref) if ref is not None else ell / lengths
    return per_pair.sum() / pairs, pair_statistics(reward[0::2] - reward[1::2], pairs)


def pair_statistics(margin: torch.Tensor, pairs: int) -> dict[str, torch.Tensor]:
    """``reward_accuracy`` (margin > 0) and ``reward_margin``, summed / ``pairs``."""
    margin = margin.detach()
    return {"reward_accuracy": (margin > 0).float().sum() / pairs,
            "reward_margin": margin.sum() / pairs}


def bradley_terry_loss(scores: torch.Tensor, pairs: int
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``bradley_terry`` on rows ``2i`` (chosen) and ``2i + 1`` (rejected), summed / ``pairs``;
    statistics ``reward_accuracy`` (chosen scored higher) and ``reward_margin``."""
    chosen, rejected = scores[0::2], scores[1::2]
    loss = get("reward_model", "bradley_terry")(chosen_scores=chosen, rejected_scores=rejected)
    return loss.sum() / pairs, pair_statistics(chosen - rejected, pairs)


def pairwise_classifier_loss(scores: torch.Tensor, pairs: int
                             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``pairwise_classifier`` on rows ``2i`` = ``s(x, y_c, y_r)`` (target 1) and ``2i + 1`` =
    ``s(x, y_r, y_c)`` (target 0): both orders of every pair, averaged, summed / ``pairs``;
    the margin is ``s(x, y_c, y_r) - s(x, y_r, y_c)``."""
    targets = torch.tensor([1.0, 0.0], dtype=scores.dtype).repeat(len(scores) // 2)
    loss = get("reward_model", "pairwise_classifier")(scores=scores, targets=targets)
    return loss.sum() / (2 * pairs), pair_statistics(scores[0::2] - scores[1::2], pairs)
