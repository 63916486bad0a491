"""Per-micro-batch losses of the fixed-data objectives (SFT, preference pairs, reward models)
built from ``algos``; every normaliser is step-global. The RL loss is the update's
(``rl_update.rl_loss``)."""

from __future__ import annotations

import torch

from posttrain.algos import StepNorm, entry, get


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """Negative log-likelihood of the trainable tokens, ``token_mean`` over the step."""
    return get("aggregation", "token_mean")(loss=-logp, mask=mask, norm=norm)


def preference_loss(name: str, options: dict, logp: torch.Tensor, mask: torch.Tensor,
                    ref_logp: torch.Tensor | None, pairs: int, reference_point: float = 0.0
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
              "desirable": torch.arange(len(ell), device=ell.device) % 2 == 0,
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
    targets = scores.new_tensor([1.0, 0.0]).repeat(len(scores) // 2)
    loss = get("reward_model", "pairwise_classifier")(scores=scores, targets=targets)
    return loss.sum() / (2 * pairs), pair_statistics(scores[0::2] - scores[1::2], pairs)


# rm.loss -> its loss on a batch's scores
REWARD_MODEL_LOSSES = {"bradley_terry": bradley_terry_loss,
                       "pairwise_classifier": pairwise_classifier_loss}
