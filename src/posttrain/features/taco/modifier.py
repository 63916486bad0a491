"""``taco`` on an RL update's token advantages."""

from __future__ import annotations

import torch

from posttrain.algos import get
from posttrain.hooks import UpdateView


def enabled(algo) -> bool:
    return algo.taco is not None


def tail_advantages(adv: torch.Tensor, update: UpdateView) -> torch.Tensor:
    """``adv`` with ``taco`` applied on the loss-mask tokens (outside it the old log-probs
    are 0: no tail there), from ``batch.old_logprobs`` and ``batch.old_entropy``."""
    batch, algo = update.batch, update.algo
    if algo.taco is None:
        return adv
    if batch.old_logprobs is None or batch.old_entropy is None:
        raise ValueError("taco needs batch.old_logprobs and batch.old_entropy")
    return torch.where(batch.loss_mask > 0, get("advantage", "taco")(
        advantages=adv, old_logp=batch.old_logprobs, old_entropy=batch.old_entropy,
        **algo.taco.model_dump()), adv)
