"""Length and effort shaping of rewards, and group filtering (docs/algorithms.md).

Inputs are per-row tensors ``[B]``: ``rewards``, ``lengths`` (tokens counted as the rule says),
``group_ids``. Each returns shaped rewards (or a penalty to add, where the spec says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import group_stats, require_finite


@register("shaping", "dapo_overlong", aliases=("overlong_reward_penalty",),
          source="DAPO: Yu et al. 2025, arXiv 2503.14476",
          output="bonus")
def dapo_overlong(*, lengths: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """Penalty to add: 0 if ``|y| <= L_max - L_c``; ``((L_max - L_c) - |y|) / L_c`` up to
    ``L_max``; -1 beyond."""
    if not 0 < cache_length <= max_length:
        raise ValueError(f"dapo_overlong: need 0 < cache_length <= max_length, got "
                         f"{cache_length}, {max_length}")
    soft = max_length - cache_length
    length = lengths.to(torch.float64)
    ramp = (soft - length) / cache_length
    return torch.where(length <= soft, 0.0, torch.where(length <= max_length, ramp, -1.0))


@register("shaping", "effort_length_penalty",
          source="DeepSeek-V4.1 Flash technical report (DeepSeek-AI 2026)", output="bonus")
def effort_length_penalty(
    *, lengths: torch.Tensor, efforts: torch.Tensor, effort_grid: Sequence[float], k_p: float,
    lam: float, c_max: float, l_norm: float,
) -> torch.Tensor:
    """Penalty to add: ``-min(C_max, k(b) l / L_norm)`` with ``k(b) = k_p exp(-(b - b_min) /
    tau)``, ``tau = lam * mean spacing of the effort grid``. Group by (prompt, effort)."""
    grid = sorted(float(b) for b in effort_grid)
    if len(grid) < 2:
        raise ValueError("effort_length_penalty: the effort grid needs at least two levels")
    tau = lam * (grid[-1] - grid[0]) / (len(grid) - 1)
    k = k_p * torch.exp(-(efforts.to(torch.float64) - grid[0]) / tau)
    return -torch.clamp(k * lengths.to(torch.float64) / l_norm, max=c_max)


@register("shaping", "budget_penalty",
          source="Kimi K3 technical report (Moonshot AI 2026)", output="reward")
def budget_penalty(
    *, rewards: torch.Tensor, lengths: torch.Tensor, budgets: torch.Tensor, tau: float,
    mode: str = "replace",
) -> torch.Tensor:
    """``R <- -1`` (``mode=replace``) or ``R - 1`` (``add``) if ``T(y) > tau b_0(x)``."""
    if mode not in ("replace", "add"):
        raise ValueError(f"budget_penalty: mode must be 'replace' or 'add', got {mode!r}")
    over = lengths > tau * budgets
    penalised = torch.full_like(rewards, -1.0) if mode == "replace" else rewards - 1
    return torch.where(over, penalised, rewards)


def toggle_budget(correct_lengths: Sequence[int], rho: float = 50) -> float:
    """``B(x)``: the ``rho``-th percentile (linear) of the initial model's correct lengths;
    infinite without any correct sample."""
    if len(correct_lengths) == 0:
        return math.inf
    values = torch.tensor(list(correct_lengths), dtype=torch.float64)
    return float(torch.quantile(values, rho / 100, interpolation="linear"))


@register("shaping", "toggle",
          source="Kimi K2.5 (Kimi Team 2026, arXiv 2602.02276), Toggle", output="reward")
def toggle(
    *, rewards: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor, budgets: torch.Tensor,
    step: int, m: int, lam: float,
) -> torch.Tensor:
    """Phase ``floor(step / m) mod 2``. Phase 0: a group whose mean reward reaches ``lam`` keeps
    only rewards of samples within the budget ``B(x)``; phase 1: rewards unchanged."""
    if (step // m) % 2 == 1:
        return rewards
    mastered = group_stats(rewards.to(torch.float64), group_ids)[0] >= lam
    within = lengths.to(torch.float64) <= budgets
    return torch.where(mastered & ~within, torch.zeros_like(rewards), rewards)


@register("shaping", "concave_length_penalty",
          source=("Composer 2: Cursor Research 2026, 'Composer 2 Technical Report', "
                  "arXiv 2603.24477"),
          feeds={"x": "lengths"}, output="cost")
def concave_length_penalty(*, x: torch.Tensor, k: float, q: float) -> torch.Tensor:
    """``C(x) = ((1 + kx)^(1-q) - 1) / (k (1 - q))``: increasing and concave; ``ln(1 + kx) / k``
    at ``q = 1``, ``x`` at ``q = 0`` or ``k -> 0``. Subtract ``coef * C``."""
    require_finite("concave_length_penalty", x=x)
    x = x.to(torch.float64) if not x.is_floating_point() else x
    if k == 0:
        return x
    if q == 1:
        return torch.log1p(k * x) / k
    return ((1 + k * x) ** (1 - q) - 1) / (k * (1 - q))


@register("shaping", "parl",
          source="Kimi K2.5 (Kimi Team 2026, arXiv 2602.02276), PARL (Agent Swarm)",
          output="reward")
def parl(*, rewards: torch.Tensor, parallel: torch.Tensor, finish: torch.Tensor, step: int,
         lam1: float, lam2: float, lam3: float = 1.0, anneal_steps: int = 0) -> torch.Tensor:
    """PARL (agent swarms): ``R = l1(t) r_parallel + l2(t) r_finish + lam3 r_perf``, with
    ``r_perf`` the episode's reward, ``r_parallel`` the instantiation reward and ``r_finish``
    the sub-agents' completion rate (``harness.swarm``); ``l_i(t) = lam_i max(0, 1 - t /
    anneal_steps)`` anneals the two auxiliary terms to 0 by step ``anneal_steps`` (0: kept)."""
    require_finite("parl", rewards=rewards, parallel=parallel, finish=finish)
    if anneal_steps < 0:
        raise ValueError(f"parl: anneal_steps must be >= 0, got {anneal_steps}")
    scale = max(0.0, 1.0 - step / anneal_steps) if anneal_steps else 1.0
    return (lam1 * scale * parallel.to(torch.float64) + lam2 * scale * finish.to(torch.float64)
            + lam3 * rewards.to(torch.float64))


@register("shaping", "dynamic_sampling", aliases=("dynamic_filtering",),
          source=("DAPO: Yu et al. 2025, arXiv 2503.14476; also MiMo-V2.6 (Xiaomi 2026) and "
                  "Skywork-OR1 (arXiv 2505.22312)"))
def dynamic_sampling(*, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Rows to keep ``[B]``: a group stays iff its rewards are not all equal
    (``max > min``; for binary rewards, ``0 < #correct < G``)."""
    require_finite("dynamic_sampling", rewards=rewards)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    g, r = int(inverse.max()) + 1, rewards.to(torch.float64)
    hi, lo = (torch.full((g,), start, dtype=torch.float64).scatter_reduce(0, inverse, r, how)
              for start, how in ((-math.inf, "amax"), (math.inf, "amin")))
    return (hi > lo)[inverse]
