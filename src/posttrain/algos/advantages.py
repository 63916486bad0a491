"""Outcome and critic advantage estimators (docs/algorithms.md). Output ``adv [B, T]``, zero where
``mask == 0``; inputs are keyword tensors: ``rewards [B]``, ``group_ids [B]``, ``mask [B, T]``.
"""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import EPS, group_stats, normalise, per_token, require_finite


@register("advantage", "grpo", aliases=("group_norm",),
          source="GRPO: Shao et al. 2024, DeepSeekMath, arXiv 2402.03300", output="episode")
def grpo(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
         eps: float = EPS) -> torch.Tensor:
    """``A_i = (r_i - mean_g) / (std_g + eps)``, std unbiased (ddof=1).

    A group of size 1, or whose rewards are all equal, gives 0.
    """
    require_finite("grpo", rewards=rewards)
    r = rewards.to(torch.float64)
    mean, std, _ = group_stats(r, group_ids)
    return per_token(normalise(r, mean, std, eps), mask)


@register("advantage", "dr_grpo", aliases=("no_std_norm",),
          source=("Dr. GRPO: Liu et al. 2025, 'Understanding R1-Zero-Like Training', "
                  "arXiv 2503.20783"),
          output="episode")
def dr_grpo(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A_i = r_i - mean_g`` (no std division: no difficulty bias); pair with
    ``seq_mean_token_sum_norm``."""
    require_finite("dr_grpo", rewards=rewards)
    r = rewards.to(torch.float64)
    return per_token(r - group_stats(r, group_ids)[0], mask)


@register("advantage", "mean_baseline", aliases=("k2_5", "composer"),
          source=("Kimi K2.5 (Kimi Team 2026, arXiv 2602.02276); Composer 2 (Cursor 2026, "
                  "arXiv 2603.24477)"),
          output="episode")
def mean_baseline(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor
                  ) -> torch.Tensor:
    """``A_i = r_i - mean_g`` (as ``dr_grpo``), meant for ``token_mean`` aggregation."""
    return dr_grpo(rewards=rewards, group_ids=group_ids, mask=mask)


@register("advantage", "maxrl", aliases=("max_rl",),
          source=("MaxRL: Tajwar et al. 2026, 'Maximum Likelihood Reinforcement Learning', "
                  "arXiv 2602.02710; prime-rl, TRL"), output="episode")
def maxrl(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A_i = (r_i - mean_g) / mean_g``, 0 when ``mean_g <= 0``: for pass/fail rewards with
    ``K`` of ``N`` passing, ``N/K - 1`` on a pass and ``-1`` on a fail, so a prompt weighs
    ``1/p`` (the gradient of ``log p``, maximum likelihood) where GRPO's is ``1/sqrt(p(1-p))``."""
    require_finite("maxrl", rewards=rewards)
    r = rewards.to(torch.float64)
    mean = group_stats(r, group_ids)[0]
    positive = mean > 0
    adv = torch.where(positive, (r - mean) / torch.where(positive, mean, 1.0), 0.0)
    return per_token(adv, mask)


@register("advantage", "rloo",
          source="RLOO: Ahmadian et al. 2024, 'Back to Basics', arXiv 2402.14740", output="episode")
def rloo(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A_i = r_i - mean_{j != i} r_j = G / (G - 1) (r_i - mean_g)``; ``G = 1`` gives 0."""
    require_finite("rloo", rewards=rewards)
    r = rewards.to(torch.float64)
    mean, _, size = group_stats(r, group_ids)
    scale = torch.where(size > 1, size / (size - 1).clamp(min=1), torch.zeros_like(size))
    return per_token(scale * (r - mean), mask)


def _whiten(values: torch.Tensor, mask: torch.Tensor, where: str) -> torch.Tensor:
    """``(x - mu) / sqrt(v + 1e-8)`` over the valid tokens of the whole batch (unbiased var)."""
    valid = mask > 0
    n = int(valid.sum())
    if n < 2:
        raise ValueError(f"{where}: whitening needs at least 2 valid tokens, got {n}")
    x = values[valid]
    return (values - x.mean()) / torch.sqrt(x.var(unbiased=True) + 1e-8) * mask


@register("advantage", "reinforce_plus_plus", aliases=("reinforce",),
          source="REINFORCE++: Hu et al. 2025, arXiv 2501.03262",
          feeds={"rewards": "outcome_rewards", "mask": "loss_mask"}, output="token")
def reinforce_plus_plus(
    *, rewards: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None = None,
    kl_coef: float = 0.0, gamma: float = 1.0,
) -> torch.Tensor:
    """``r_t = -beta k1_t + 1[t = T_i] R_i``; ``G_t = sum_{s >= t} gamma^(s-t) r_s``; whitened
    over all valid tokens of the batch: ``A = (G - mu) / sqrt(v + 1e-8)``.

    ``kl`` is ``k1 = old_logp - ref_logp``; discounting counts valid tokens only.
    """
    require_finite("reinforce_plus_plus", rewards=rewards, kl=kl)
    m = mask.to(torch.float64)
    token_r = torch.zeros_like(m) if kl is None else -kl_coef * kl.to(torch.float64) * m
    last = (m.cumsum(dim=1) == m.sum(dim=1, keepdim=True)) & (m > 0)
    token_r = token_r + last * rewards.to(torch.float64)[:, None]
    returns = torch.zeros_like(m)
    running = torch.zeros(m.shape[0], dtype=torch.float64)
    for t in reversed(range(m.shape[1])):
        running = torch.where(m[:, t] > 0, token_r[:, t] + gamma * running, running)
        returns[:, t] = running
    return _whiten(returns * m, m, "reinforce_plus_plus").to(mask.dtype)


@register("advantage", "reinforce_plus_plus_baseline", aliases=("reinforce_baseline",),
          source="REINFORCE++ w/ baseline: Hu et al. 2025, arXiv 2501.03262; verl",
          output="episode")
def reinforce_plus_plus_baseline(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``R_i - mean_g`` broadcast over tokens, then whitened over all valid tokens of the batch
    (KL goes in the loss)."""
    centred = dr_grpo(rewards=rewards, group_ids=group_ids, mask=mask.to(torch.float64))
    return _whiten(centred, mask.to(torch.float64), "reinforce_plus_plus_baseline").to(mask.dtype)


@register("advantage", "remax", source="ReMax: Li et al. 2023, arXiv 2310.10505", output="episode")
def remax(
    *, rewards: torch.Tensor, baseline_rewards: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``A_i = R(y_i) - R(y_greedy)``: the baseline is the reward of the prompt's greedy decode."""
    require_finite("remax", rewards=rewards, baseline_rewards=baseline_rewards)
    return per_token(rewards.to(torch.float64) - baseline_rewards.to(torch.float64), mask)


@register("advantage", "gae", aliases=("ppo",),
          source=("GAE: Schulman et al. 2015, arXiv 1506.02438; PPO: Schulman et al. 2017, "
                  "arXiv 1707.06347"),
          feeds={"rewards": "token_rewards", "mask": "loss_mask"}, output="token")
def gae(
    *, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
    kl: torch.Tensor | None = None, kl_coef: float = 0.0, gamma: float = 1.0, lam: float = 0.95,
    reward_clip: float | None = None,
) -> torch.Tensor:
    """``r_t = -beta KL_t + 1[t = T_i] clip(R_i, +-c)``; ``delta_t = r_t + gamma V_{t+1} - V_t``
    (``V_{T_i+1} = 0``); ``A_t = delta_t + gamma lam A_{t+1}``. Value targets are ``A + V``.

    Holes in the mask (tool output) are skipped: ``V_{t+1}`` is the next valid token's value.
    """
    require_finite("gae", rewards=rewards, values=values, kl=kl)
    m, v, r = (t.to(torch.float64) for t in (mask, values, rewards))
    if reward_clip is not None:
        r = r.clamp(-reward_clip, reward_clip)
    token_r = torch.zeros_like(m) if kl is None else -kl_coef * kl.to(torch.float64) * m
    last = (m.cumsum(dim=1) == m.sum(dim=1, keepdim=True)) & (m > 0)
    token_r = token_r + last * r[:, None]
    adv = torch.zeros_like(m)
    next_value = torch.zeros(m.shape[0], dtype=torch.float64)
    running = torch.zeros(m.shape[0], dtype=torch.float64)
    for t in reversed(range(m.shape[1])):
        valid = m[:, t] > 0
        delta = token_r[:, t] + gamma * next_value - v[:, t]
        running = torch.where(valid, delta + gamma * lam * running, running)
        next_value = torch.where(valid, v[:, t], next_value)
        adv[:, t] = running * m[:, t]
    return adv.to(mask.dtype)


@register("advantage", "opd",
          source=("GKD: Agarwal et al. 2023, arXiv 2306.13649; Lu et al., 'On-Policy "
                  "Distillation' (Thinking Machines blog, 2025); Kimi K3 technical report "
                  "(Moonshot AI 2026); MiMo-V2-Flash (Xiaomi 2026, arXiv 2601.02780)"))
def opd(
    *, teacher_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor,
    clip: float | None = None, alpha: float = 0.0, orm_advantages: torch.Tensor | None = None,
) -> torch.Tensor:
    """``A_t = sg(logp_T - logp)``, optionally clipped to ``[-R_max, R_max]`` (``opd_clip``),
    plus ``alpha * A_ORM_i`` (``mopd``)."""
    require_finite("opd", teacher_logp=teacher_logp, logp=logp, orm_advantages=orm_advantages)
    adv = (teacher_logp - logp).detach()
    if clip is not None:
        adv = adv.clamp(-clip, clip)
    if orm_advantages is not None:
        orm = orm_advantages.to(adv.dtype)
        adv = adv + alpha * (orm[:, None] if orm.dim() == 1 else orm)
    return adv * mask
