"""Distillation (docs/algorithms.md). ``P`` = teacher, ``Q`` = student, as full-vocabulary
log-probabilities ``[..., V]``; each divergence returns one value a position and sends gradient
through ``Q`` only. The sampled-token forms (``opd_*``, ``mopd``, ``self_distill``) return
per-token advantages for a policy-gradient loss."""

from __future__ import annotations

import math

import torch

from posttrain.algos.advantages import opd
from posttrain.algos.registry import register
from posttrain.algos.tensors import require_finite


def _kl(p_logp: torch.Tensor, q_logp: torch.Tensor) -> torch.Tensor:
    """``sum P (log P - log Q)``, with ``0 log 0 = 0``."""
    return (p_logp.exp() * (p_logp - q_logp)).nan_to_num(nan=0.0).sum(-1)


def _inputs(where: str, teacher_logp: torch.Tensor, student_logp: torch.Tensor):
    """Teacher detached; NaN raises (-inf, a zero probability, is allowed)."""
    require_finite(where, teacher_logp=teacher_logp.clamp(min=-1e30),
                   student_logp=student_logp.clamp(min=-1e30))
    return teacher_logp.detach(), student_logp


@register("divergence", "forward_kl",
          source=("standard KL divergence, as compared in GKD: Agarwal et al. 2023, "
                  "arXiv 2306.13649"))
def forward_kl(*, teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """``KL(P || Q) = sum P log(P / Q)`` (mean-seeking)."""
    p, q = _inputs("forward_kl", teacher_logp, student_logp)
    return _kl(p, q)


@register("divergence", "reverse_kl",
          source=("standard KL divergence, as compared in GKD: Agarwal et al. 2023, "
                  "arXiv 2306.13649"))
def reverse_kl(*, teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """``KL(Q || P) = sum Q log(Q / P)`` (mode-seeking)."""
    p, q = _inputs("reverse_kl", teacher_logp, student_logp)
    return _kl(q, p)


def _mix(a_logp: torch.Tensor, b_logp: torch.Tensor, weight_a: float) -> torch.Tensor:
    """``log(w a + (1 - w) b)``."""
    return torch.logaddexp(math.log(weight_a) + a_logp, math.log1p(-weight_a) + b_logp)


@register("divergence", "jsd",
          source="generalised JSD as in GKD: Agarwal et al. 2023, arXiv 2306.13649")
def jsd(
    *, teacher_logp: torch.Tensor, student_logp: torch.Tensor, beta: float = 0.5
) -> torch.Tensor:
    """``beta KL(P || M) + (1 - beta) KL(Q || M)``, ``M = beta P + (1 - beta) Q``; divided by
    ``beta`` it tends to the forward KL as ``beta -> 0``, by ``1 - beta`` to the reverse KL as
    ``beta -> 1``."""
    if not 0 < beta < 1:
        raise ValueError(f"jsd: beta must lie in (0, 1), got {beta}")
    p, q = _inputs("jsd", teacher_logp, student_logp)
    m = _mix(p, q, beta)
    return beta * _kl(p, m) + (1 - beta) * _kl(q, m)


@register("divergence", "uld",
          source=("ULD: Boizard et al. 2024, 'Towards Cross-Tokenizer Distillation', "
                  "arXiv 2402.12030; TRL GOLD"))
def uld(*, teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """Universal logit distillation: ``sum_i |P_(i) - Q_(i)|``, the probabilities of each
    sorted in decreasing order and the shorter vocabulary padded with zeros (the Wasserstein
    distance under a uniform cost), so teacher and student vocabularies may differ."""
    p, q = _inputs("uld", teacher_logp, student_logp)
    p_sorted = p.exp().sort(dim=-1, descending=True).values
    q_sorted = q.exp().sort(dim=-1, descending=True).values
    width = max(p_sorted.shape[-1], q_sorted.shape[-1])
    p_sorted = torch.nn.functional.pad(p_sorted, (0, width - p_sorted.shape[-1]))
    q_sorted = torch.nn.functional.pad(q_sorted, (0, width - q_sorted.shape[-1]))
    return (p_sorted.to(q_sorted.dtype) - q_sorted).abs().sum(-1)


@register("divergence", "skew_fkl", source="Skew KL: Ko et al. 2024, 'DistiLLM', arXiv 2402.03898")
def skew_fkl(
    *, teacher_logp: torch.Tensor, student_logp: torch.Tensor, alpha: float = 0.1
) -> torch.Tensor:
    """``KL(P || alpha P + (1 - alpha) Q)``."""
    p, q = _inputs("skew_fkl", teacher_logp, student_logp)
    return _kl(p, _mix(p, q, alpha))


@register("divergence", "skew_rkl", source="Skew KL: Ko et al. 2024, 'DistiLLM', arXiv 2402.03898")
def skew_rkl(
    *, teacher_logp: torch.Tensor, student_logp: torch.Tensor, alpha: float = 0.1
) -> torch.Tensor:
    """``KL(Q || alpha Q + (1 - alpha) P)``."""
    p, q = _inputs("skew_rkl", teacher_logp, student_logp)
    return _kl(q, _mix(q, p, alpha))


@register("divergence", "tvd", source="total variation distance (textbook definition)")
def tvd(*, teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """``1/2 sum |P - Q|`` (at most 1)."""
    p, q = _inputs("tvd", teacher_logp, student_logp)
    return 0.5 * (p.exp() - q.exp()).abs().sum(-1)


@register("divergence", "full_vocab_rkl",
          source=("DeepSeek-V4 technical report (DeepSeek-AI 2026); top-k: SDPO (Hübotter et al. "
                  "2026, arXiv 2601.20802)"))
def full_vocab_rkl(
    *, teacher_logp: torch.Tensor, student_logp: torch.Tensor, weights: torch.Tensor | None = None,
    topk: int | None = None,
) -> torch.Tensor:
    """``sum_i w_i KL(Q || P_i)`` over the full vocabulary for teachers ``[K, ..., V]`` (or one
    ``[..., V]``), exact gradient. ``topk``: the student's top-k tokens plus one tail bucket
    holding each distribution's remaining mass (``k = V`` is the full value)."""
    p = teacher_logp.detach()
    p = p[None] if p.dim() == student_logp.dim() else p
    w = student_logp.new_full((p.shape[0],), 1.0 / p.shape[0]) if weights is None \
        else weights.to(student_logp)
    q = student_logp.expand_as(p)
    if topk is not None and topk < p.shape[-1]:
        idx = student_logp.detach().topk(topk, dim=-1).indices.expand(*p.shape[:-1], topk)
        q_b, p_b = (torch.cat([top, (1 - top.sum(-1, keepdim=True)).clamp(min=0)], -1)
                    for top in (q.gather(-1, idx).exp(), p.gather(-1, idx).exp()))
        per_teacher = (torch.xlogy(q_b, q_b) - torch.xlogy(q_b, p_b)).sum(-1)
    else:
        per_teacher = _kl(q, p)
    return (w.view(-1, *[1] * (per_teacher.dim() - 1)) * per_teacher).sum(0)


@register("divergence", "multi_teacher",
          source=("DeepSeek-V4 technical report (DeepSeek-AI 2026); Kimi K3 technical report "
                  "(Moonshot AI 2026); MOPD, MiMo-V2-Flash (Xiaomi 2026, arXiv 2601.02780)"))
def multi_teacher(*, divergences: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mixture ``sum_i w_i D_i`` over teachers (``divergences [K, ...]``, ``sum w = 1``); routing
    by (domain, effort) picks one teacher per sample instead."""
    if abs(float(weights.sum()) - 1) > 1e-6:
        raise ValueError(f"multi_teacher: weights must sum to 1, got {float(weights.sum())}")
    return (weights.to(divergences.dtype).view(-1, *[1] * (divergences.dim() - 1))
            * divergences).sum(0)


@register("divergence", "opd_sampled",
          source=("Lu et al., 'On-Policy Distillation' (Thinking Machines blog, 2025); GKD: "
                  "Agarwal et al. 2023, arXiv 2306.13649; MiMo-V2-Flash (Xiaomi 2026, "
                  "arXiv 2601.02780)"))
def opd_sampled(
    *, teacher_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """On-policy ``y ~ Q``: ``A_t = sg(logp_T - logp)``; since ``E_Q[-A_t] = KL(Q || P)``, a
    policy gradient on it is the per-token reverse-KL gradient."""
    return opd(teacher_logp=teacher_logp, logp=logp, mask=mask)


@register("divergence", "opd_clip", source="Kimi K3 technical report (Moonshot AI 2026)")
def opd_clip(
    *, teacher_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor, r_max: float
) -> torch.Tensor:
    """``r_t = clip(sg(logp_T - logp), -R_max, R_max)``; the student is conditioned on the
    effort level whose teacher scores it."""
    return opd(teacher_logp=teacher_logp, logp=logp, mask=mask, clip=r_max)


@register("divergence", "mopd",
          source="MOPD: Xiaomi LLM-Core 2026, 'MiMo-V2-Flash Technical Report', arXiv 2601.02780")
def mopd(
    *, teacher_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor,
    orm_advantages: torch.Tensor, alpha: float,
) -> torch.Tensor:
    """``A_t = sg(logp_T(d_x) - logp) + alpha A_ORM_i``: the domain teacher's token advantage
    plus the outcome reward's; train with ``mimo_is_pg``."""
    return opd(teacher_logp=teacher_logp, logp=logp, mask=mask, alpha=alpha,
               orm_advantages=orm_advantages)


@register("divergence", "self_distill", aliases=("sdft", "sdpo", "opsd"),
          source=("SDFT: Shenfeld et al. 2026, arXiv 2601.19897; SDPO: Hübotter et al. 2026, "
                  "arXiv 2601.20802; OPSD: Zhao et al. 2026, arXiv 2601.18734"))
def self_distill(
    *, teacher_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Token reward ``r_t = log pi(y_t | x, z, y_<t) - log pi(y_t | x, y_<t)``: the same
    weights with privileged context ``z`` (demo, feedback, solution) as teacher, no gradient;
    ``z`` tokens are never in the student's loss."""
    return opd(teacher_logp=teacher_logp, logp=logp, mask=mask)


@register("divergence", "gkd", source="GKD: Agarwal et al. 2023, arXiv 2306.13649; TRL GKDTrainer")
def gkd(
    *, data_divergence: torch.Tensor, on_policy_divergence: torch.Tensor, lmbda: float = 0.5
) -> torch.Tensor:
    """``(1 - lambda) D(data) + lambda D(student samples)``."""
    if not 0 <= lmbda <= 1:
        raise ValueError(f"gkd: lmbda must lie in [0, 1], got {lmbda}")
    return (1 - lmbda) * data_divergence + lmbda * on_policy_divergence


@register("divergence", "mtp_self_distill",
          source=("Composer 2 (Cursor 2026, arXiv 2603.24477); MTP: DeepSeek-V3 (DeepSeek-AI "
                  "2024, arXiv 2412.19437)"))
def mtp_self_distill(
    *, main_logp: torch.Tensor, mtp_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The token mean over ``mask [..., T]`` of ``KL(sg p_main(. | x_<=t+1) || p_mtp(. |
    h_t, e(x_t+1)))``: a multi-token-prediction head, reading the hidden state at ``t`` and
    the next token's embedding, learns the main head's distribution of token ``t + 2``
    (``main_logp``, ``mtp_logp``: ``[..., T, V]`` log-probs, aligned; no gradient to the main
    model). No masked position: 0."""
    p, q = _inputs("mtp_self_distill", main_logp, mtp_logp)
    mask = mask.to(q.dtype)
    return (_kl(p, q) * mask).sum() / mask.sum().clamp(min=1)


def rl_kd_objective(reward: torch.Tensor, divergence: torch.Tensor, alpha: float) -> torch.Tensor:
    """RL with distillation: maximise ``(1 - alpha) r - alpha D``."""
    return (1 - alpha) * reward - alpha * divergence
