"""From scored episodes to advantages: KL in the reward, then the configured estimator."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain.algos import get
from posttrain.pipelines.settings import MULTI_REWARD_ESTIMATORS, AlgoConfig
from posttrain.types import Batch, Episode


def reward_parts(episodes: Sequence[Episode], names: Sequence[str]) -> torch.Tensor:
    """``[B, K]``: the named reward parts of every row (one row per segment)."""
    return torch.tensor([[ep.rewards[n] for n in names] for ep in episodes for _ in ep.segments],
                        dtype=torch.float64)


def token_kl(batch: Batch, algo: AlgoConfig) -> torch.Tensor:
    """``KL_t(old, ref)`` on the loss-mask tokens."""
    kl = get("kl", algo.kl.estimator)(logp=batch.old_logprobs, ref_logp=batch.ref_logprobs)
    return kl * batch.loss_mask


def kl_in_reward(batch: Batch, algo: AlgoConfig) -> torch.Tensor:
    """``R_i - coef sum_t KL_t(old, ref)``: the group estimators' reward with KL inside."""
    return batch.rewards - algo.kl.coef * token_kl(batch, algo).sum(dim=1)


def compute_advantages(
    batch: Batch, episodes: Sequence[Episode], algo: AlgoConfig, part_weights: dict[str, float]
) -> torch.Tensor:
    """``[B, T]`` advantages of ``batch`` (built from ``episodes``) under ``algo``."""
    estimator = get("advantage", algo.adv_estimator)
    common = {"group_ids": batch.group_index, "mask": batch.loss_mask}
    if algo.adv_estimator in MULTI_REWARD_ESTIMATORS:
        names = list(part_weights)
        return estimator(rewards=reward_parts(episodes, names),
                         weights=[part_weights[n] for n in names], **common)
    in_reward = algo.kl.coef > 0 and algo.kl.placement == "in_reward"
    if algo.adv_estimator == "gae":  # KL per token: r_t = -coef KL_t + 1[t = T] R
        kl = token_kl(batch, algo) if in_reward else None
        return estimator(rewards=batch.rewards, values=batch.old_values, mask=batch.loss_mask,
                         kl=kl, kl_coef=algo.kl.coef, **algo.gae_options())
    rewards = kl_in_reward(batch, algo) if in_reward else batch.rewards
    return estimator(rewards=rewards, **common)
