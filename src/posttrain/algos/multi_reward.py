"""Multi-reward advantage estimators and reward synthesis (docs/algorithms.md).

``rewards [B, K]`` holds K named reward parts a row; ``weights`` (default all 1) weighs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import EPS, group_stats, normalise, per_token, require_finite

# the pipeline's reward parts (one column a part) and their weights feed these estimators
PARTS = {"rewards": "reward_parts", "weights": "part_weights"}


def _per_reward(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float):
    """``A_k = (r_k - mean_g) / (std_g + eps)`` for each reward column, and the group stds."""
    require_finite("multi-reward advantage", rewards=rewards)
    r = rewards.to(torch.float64)
    mean, std, _ = group_stats(r, group_ids)
    return normalise(r, mean, std, eps), std


def _weights(weights: Sequence[float] | None, k: int) -> torch.Tensor:
    w = torch.ones(k, dtype=torch.float64) if weights is None else torch.tensor(
        list(weights), dtype=torch.float64)
    if w.shape != (k,):
        raise ValueError(f"{k} reward parts but {w.numel()} weights")
    return w


@register("advantage", "gdpo", aliases=("normalize_then_sum",),
          source="GDPO: Liu et al. (NVIDIA) 2026, arXiv 2601.05242",
          feeds=PARTS, output="episode")
def gdpo(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
    weights: Sequence[float] | None = None, eps: float = EPS,
) -> torch.Tensor:
    """``A_k`` = each reward normalised in its group; ``S = sum_k w_k A_k``; ``A = (S - mean) /
    (std + eps)`` over the whole batch."""
    a, _ = _per_reward(rewards, group_ids, eps)
    s = a @ _weights(weights, a.shape[1])
    mean, std, _ = group_stats(s, torch.zeros_like(group_ids))  # over the whole batch
    return per_token(normalise(s, mean, std, eps), mask)


@register("advantage", "gd2po",
          source="GD2PO: Liu et al. (Qwen) 2026, arXiv 2606.16771", feeds=PARTS, output="episode")
def gd2po(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
    weights: Sequence[float] | None = None, filter: str = "hard", tau: float = 0.8,
    query_weight: bool = True, eps: float = EPS,
) -> torch.Tensor:
    """GDPO terms ``c_jk = w_k A_jk`` with a conflict filter: ``hard`` drops a row whose terms
    have both signs; ``snr`` keeps it iff ``|sum c| / (sum |c| + eps) >= tau``. Kept rows get
    ``q_i kappa_j sum_k c_jk`` with ``q_i`` = the group's kept share (1 without query
    weighting); no batch re-normalisation."""
    if filter not in ("hard", "snr"):
        raise ValueError(f"gd2po: filter must be 'hard' or 'snr', got {filter!r}")
    a, _ = _per_reward(rewards, group_ids, eps)
    c = a * _weights(weights, a.shape[1])
    total = c.sum(dim=1)
    keep = (~((c > 0).any(dim=1) & (c < 0).any(dim=1)) if filter == "hard"
            else total.abs() / (c.abs().sum(dim=1) + eps) >= tau)
    kept = keep.to(torch.float64)
    q = group_stats(kept, group_ids)[0] if query_weight else torch.ones_like(kept)
    return per_token(q * kept * total, mask)


@register("advantage", "dvao",
          source="DVAO: Jiang et al. 2026, arXiv 2605.25604", feeds=PARTS, output="episode")
def dvao(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
    weights: Sequence[float] | None = None, eps: float = EPS,
) -> torch.Tensor:
    """``A = sum_k w~_k A_k`` with ``w~_k = w_k std_k / sum_l w_l std_l`` (group stds): saturated,
    low-variance rewards are down-weighted. All stds 0 gives 0."""
    a, std = _per_reward(rewards, group_ids, eps)
    ws = std * _weights(weights, a.shape[1])
    denom = ws.sum(dim=1, keepdim=True)
    mixed = torch.where(denom > 0, ws / denom.clamp(min=1e-300), torch.zeros_like(ws))
    return per_token((mixed * a).sum(dim=1), mask)


@register("advantage", "grs", source="Xiaomi MiMo-V2.6 post-training report, 2026 (GRS)")
def grs(
    *, test_rewards: torch.Tensor, solution_scores: torch.Tensor, behaviour_scores: torch.Tensor,
) -> torch.Tensor:
    """Groupwise reward synthesis: ``R_i = R_test S_sol S_beh`` if ``R_test = 1``, else 0
    (``S`` in [0, 1]). Returns rewards ``[B]``."""
    require_finite("grs", test_rewards=test_rewards, solution_scores=solution_scores,
                   behaviour_scores=behaviour_scores)
    for name, s in (("solution_scores", solution_scores), ("behaviour_scores", behaviour_scores)):
        if bool(((s < 0) | (s > 1)).any()):
            raise ValueError(f"grs: {name} must lie in [0, 1]")
    passed = (test_rewards == 1).to(torch.float64)
    return passed * solution_scores.to(torch.float64) * behaviour_scores.to(torch.float64)
