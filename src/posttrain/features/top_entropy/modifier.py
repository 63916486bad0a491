"""``top_entropy`` on an RL update's token advantages."""

from __future__ import annotations

import torch

from posttrain.algos import get
from posttrain.hooks import UpdateView


def enabled(algo) -> bool:
    return algo.top_entropy is not None


def forking_advantages(adv: torch.Tensor, update: UpdateView) -> torch.Tensor:
    """``adv`` kept only on the highest-entropy share ``rho`` of the step's tokens."""
    batch, algo = update.batch, update.algo
    if algo.top_entropy is None:
        return adv
    return get("advantage", "top_entropy")(advantages=adv, old_entropy=batch.old_entropy,
                                           mask=batch.loss_mask, rho=algo.top_entropy.rho)
