"""Conversational and environment rewards (docs/algorithms.md) that a task or environment computes:
CURIO's potential-based curiosity about the user, the kernel environment's speed reward, and
the agreement of the policy's own grade with a verifiable outcome (``actor_as_grm``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import require_finite

CURIO_FORMS = ("linear", "log", "entropy")


def bayes_belief(belief: torch.Tensor, likelihood: torch.Tensor) -> torch.Tensor:
    """``b'(u_i) = P(s' | s, a, u_i) b(u_i) / sum_j P(s' | s, a, u_j) b(u_j)``; an observation
    that every type with belief deems impossible is a ``ValueError``."""
    require_finite("bayes_belief", belief=belief, likelihood=likelihood)
    if bool((likelihood < 0).any()):
        raise ValueError("bayes_belief: likelihoods must be >= 0")
    joint = belief.to(torch.float64) * likelihood.to(torch.float64)
    total = joint.sum()
    if total <= 0:
        raise ValueError("bayes_belief: the observation has likelihood 0 under every type "
                         "the belief allows")
    return joint / total


def curio_potential(belief: torch.Tensor, true_type: int, form: str,
                    floor: float = 1e-6) -> torch.Tensor:
    """``phi(b)``: ``b(u*)`` (linear), ``log max(b(u*), floor)`` (log), ``-H(b)`` (entropy)."""
    if form not in CURIO_FORMS:
        raise ValueError(f"curio: form must be one of {CURIO_FORMS}, got {form!r}")
    b = belief.to(torch.float64)
    if form == "linear":
        return b[..., true_type]
    if form == "log":
        return torch.log(b[..., true_type].clamp(min=floor))
    return torch.special.xlogy(b, b).sum(dim=-1)


@register("reward", "curio",
          source=("CURIO: Wan et al. 2025, 'Enhancing Personalized Multi-Turn Dialogue with "
                  "Curiosity Reward', arXiv 2504.03206"), output="step")
def curio(
    *, beliefs: Sequence[torch.Tensor], true_types: Sequence[int], gamma: float = 1.0,
    form: str = "log", floor: float = 1e-6,
) -> list[torch.Tensor]:
    """Per user turn, ``R_int_t = gamma phi(b_{t+1}) - phi(b_t)`` with ``phi = b(u*)``
    (``linear``), ``log b(u*)`` (``log``, clamped at ``floor``) or ``-H(b)`` (``entropy``:
    ``H(b_t) - gamma H(b_{t+1})``, which can reward a confident wrong belief). Potential-based:
    ``sum_t gamma^t R_int_t = gamma^T phi(b_T) - phi(b_0)``, so the optimal policy is unchanged.
    ``beliefs``: per episode ``[T + 1, K]`` (``b_0`` .. ``b_T``); returns per episode ``[T]``."""
    if not 0 < gamma <= 1:
        raise ValueError(f"curio: gamma must be in (0, 1], got {gamma}")
    if len(beliefs) != len(true_types):
        raise ValueError(f"curio: {len(beliefs)} belief sequences for {len(true_types)} types")
    out = []
    for b, u in zip(beliefs, true_types):
        require_finite("curio", beliefs=b)
        if b.dim() != 2 or not 0 <= int(u) < b.shape[1]:
            raise ValueError(f"curio: beliefs must be [T + 1, K] and the true type in [0, K), "
                             f"got {tuple(b.shape)} and {u}")
        phi = curio_potential(b, int(u), form, floor)
        out.append(gamma * phi[1:] - phi[:-1])
    return out


@register("reward", "kernel_speed",
          source="Kimi K3 technical report (Moonshot AI 2026), kernel reward", output="reward")
def kernel_speed(
    *, seconds: torch.Tensor, correct: torch.Tensor, expert_seconds: torch.Tensor,
    roofline_seconds: torch.Tensor,
) -> torch.Tensor:
    """With speed ``v = 1 / t``: ``r = 0.5 v / v_e`` for ``v <= v_e``, else ``min(1, 0.5 + 0.5
    (log v - log v_e) / (log v_r - log v_e))`` (0.5 at the expert implementation's speed, 1 at
    the roofline's); an incorrect kernel scores 0."""
    require_finite("kernel_speed", seconds=seconds, expert_seconds=expert_seconds,
                   roofline_seconds=roofline_seconds)
    t, t_e, t_r = (x.to(torch.float64) for x in (seconds, expert_seconds, roofline_seconds))
    if bool((t <= 0).any()) or bool((t_r <= 0).any()) or bool((t_r >= t_e).any()):
        raise ValueError("kernel_speed: need times > 0 and the roofline faster than the expert "
                         "(0 < roofline_seconds < expert_seconds)")
    slow = 0.5 * t_e / t
    fast = (0.5 + 0.5 * (torch.log(t_e) - torch.log(t)) / (torch.log(t_e) - torch.log(t_r)))
    reward = torch.where(t >= t_e, slow, fast.clamp(max=1.0))
    return torch.where(correct.to(torch.bool), reward, torch.zeros_like(reward))


@register("reward", "actor_as_grm",
          source=("DeepSeek-V4 technical report (DeepSeek-AI 2026), actor as generative reward "
                  "model"), output="reward")
def actor_as_grm(*, grades: torch.Tensor, outcomes: torch.Tensor) -> torch.Tensor:
    """The policy graded a response: ``r = 1{(g >= 1/2) = (o >= 1/2)}`` for its grade ``g``
    (the ``genrm`` score over ``score_max``, in [0, 1]; NaN where it wrote none, which scores
    0) and the response's verifiable outcome ``o`` (1 right, 0 wrong)."""
    require_finite("actor_as_grm", outcomes=outcomes)
    g, o = grades.to(torch.float64), outcomes.to(torch.float64)
    agree = ((g >= 0.5) == (o >= 0.5)).to(torch.float64)
    return torch.where(torch.isnan(g), torch.zeros_like(agree), agree)


def discounted_sum(values: Sequence[float], gamma: float) -> float:
    """``sum_t gamma^t x_t``."""
    return math.fsum(gamma ** t * float(x) for t, x in enumerate(values))
