"""Loss aggregation (docs/algorithms.md) with step-global normalisers.

The final loss of one optimiser step is ``sum_k sum_{i in mb_k} sum_t W_it m_it L_it``; the
normalisers in ``W`` come from the *whole step* (``StepNorm``), so any micro-batch split gives
the same gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posttrain.algos.registry import register


@dataclass(frozen=True)
class StepNorm:
    """Normalisers of one optimiser step: ``num_tokens = sum m``, ``num_seqs`` = sequences with
    at least one trainable token, ``batch_size`` = all sequences, ``max_len`` = the constant C."""

    num_tokens: float
    num_seqs: float
    batch_size: float
    max_len: float

    @classmethod
    def from_mask(cls, mask: torch.Tensor, max_len: int | None = None) -> StepNorm:
        n = mask.sum(dim=1)
        return cls(num_tokens=float(n.sum().item()), num_seqs=float((n > 0).sum().item()),
                   batch_size=float(mask.shape[0]),
                   max_len=float(max_len if max_len is not None else mask.shape[1]))


def _safe(x: torch.Tensor, denom: float) -> torch.Tensor:
    return x / denom if denom > 0 else x * 0.0


@register("aggregation", "token_mean", aliases=("dapo",),
          source=("DAPO: Yu et al. 2025, arXiv 2503.14476; also MiMo-V2.6 (Xiaomi 2026) and "
                  "Skywork-OR1 (arXiv 2505.22312)"))
def token_mean(*, loss: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """``W = 1 / N_tok``: every token weighs the same."""
    return _safe((loss * mask).sum(), norm.num_tokens)


@register("aggregation", "seq_mean_token_mean", aliases=("grpo",),
          source="GRPO: Shao et al. 2024, DeepSeekMath, arXiv 2402.03300")
def seq_mean_token_mean(*, loss: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """``W = 1 / (N_seq * n_i)``: every sequence weighs the same."""
    per_seq = (loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return _safe(per_seq.sum(), norm.num_seqs)


@register("aggregation", "seq_mean_token_sum",
          source="verl (HybridFlow, Sheng et al. 2024, arXiv 2409.19256)")
def seq_mean_token_sum(*, loss: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """``W = 1 / N_seq``: sum over tokens, mean over sequences."""
    return _safe((loss * mask).sum(), norm.num_seqs)


@register("aggregation", "seq_mean_token_sum_norm", aliases=("dr_grpo",),
          source="Dr. GRPO: Liu et al. 2025, arXiv 2503.20783")
def seq_mean_token_sum_norm(
    *, loss: torch.Tensor, mask: torch.Tensor, norm: StepNorm
) -> torch.Tensor:
    """``W = 1 / (B * C)`` with ``C = max_len`` (Dr.GRPO)."""
    return _safe((loss * mask).sum(), norm.batch_size * norm.max_len)


@register("aggregation", "token_sum",
          source="Tinker's loss functions (Thinking Machines Lab 2025, Tinker documentation)")
def token_sum(*, loss: torch.Tensor, mask: torch.Tensor, norm: StepNorm) -> torch.Tensor:
    """``W = 1``: every token's loss summed, the scale left to the advantages or weights
    (Tinker's convention; ``norm`` is not read)."""
    return (loss * mask).sum()
