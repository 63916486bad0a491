"""Evaluation metrics (docs/algorithms.md). Per task: ``n`` samples, ``c`` correct; each metric
averages over tasks and needs ``k <= n``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

from posttrain.algos.registry import register


def _check(n: Sequence[int], c: Sequence[int], k: int, where: str) -> None:
    if len(n) != len(c) or not n:
        raise ValueError(f"{where}: need one (n, c) per task, got {len(n)} and {len(c)}")
    for ni, ci in zip(n, c):
        if not 0 <= ci <= ni or not 1 <= k <= ni:
            raise ValueError(f"{where}: need 0 <= c <= n and 1 <= k <= n, got n={ni} c={ci} k={k}")


@register("metric", "pass_at_k",
          source=("unbiased estimator of Chen et al. 2021, 'Evaluating LLMs Trained on Code', "
                  "arXiv 2107.03374"))
def pass_at_k(*, n: Sequence[int], c: Sequence[int], k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)`` (1 if ``n - c < k``), computed as ``1 - prod_{j=n-c+1}^{n}
    (1 - k / j)``."""
    _check(n, c, k, "pass_at_k")
    return sum(1.0 if ni - ci < k
               else 1.0 - math.prod(1.0 - k / j for j in range(ni - ci + 1, ni + 1))
               for ni, ci in zip(n, c)) / len(n)


@register("metric", "pass_hat_k", aliases=("pass^k",),
          source="τ-bench: Yao et al. 2024, arXiv 2406.12045")
def pass_hat_k(*, n: Sequence[int], c: Sequence[int], k: int) -> float:
    """``C(c, k) / C(n, k)``: the chance that k samples all succeed."""
    _check(n, c, k, "pass_hat_k")
    return sum(math.comb(ci, k) / math.comb(ni, k) for ni, ci in zip(n, c)) / len(n)


@register("metric", "mean_at_k", aliases=("avg_at_k",),
          source="avg@k as reported in Skywork-OR1 (He et al. 2025, arXiv 2505.22312)")
def mean_at_k(*, scores: Sequence[Sequence[float]]) -> float:
    """Mean score of each task's k samples, averaged over tasks."""
    if not scores or any(len(s) == 0 for s in scores):
        raise ValueError("mean_at_k: every task needs at least one score")
    return sum(sum(s) / len(s) for s in scores) / len(scores)


@register("metric", "maj_at_k",
          source=("majority voting (cons@k) as reported in DeepSeek-R1 (DeepSeek-AI 2025, "
                  "arXiv 2501.12948)"))
def maj_at_k(*, answers: Sequence[Sequence[Hashable | None]], gold: Sequence[Hashable]) -> float:
    """``1[most frequent extracted answer = gold]``; ties go to the answer that appeared first;
    ``None`` answers are excluded."""
    if len(answers) != len(gold):
        raise ValueError("maj_at_k: one gold answer per task")
    hits = 0
    for sample, ref in zip(answers, gold):
        votes = Counter(a for a in sample if a is not None)
        if votes:
            best = max(votes.values())
            winner = next(a for a in sample if a is not None and votes[a] == best)
            hits += winner == ref
    return hits / len(gold)


def standard_error(p: float, n_tasks: int) -> float:
    """``sqrt(p (1 - p) / N_tasks)``: the noise of an accuracy over ``N_tasks`` items."""
    return math.sqrt(p * (1 - p) / n_tasks)


@register("metric", "rm_win_rate",
          source="CharacterFlywheel: Nie et al. (Meta) 2026, arXiv 2603.01973")
def rm_win_rate(*, policy_scores: Sequence[float], reference_scores: Sequence[float]) -> float:
    """``(wins + ties / 2) / n``: how often the reward model scores the policy's response to a
    prompt above the reference model's; above 0.65 the policy is likely over-optimising it."""
    if len(policy_scores) != len(reference_scores) or not policy_scores:
        raise ValueError(f"rm_win_rate: need one reference score per policy score, got "
                         f"{len(policy_scores)} and {len(reference_scores)}")
    wins = sum(1.0 if p > r else 0.5 if p == r else 0.0
               for p, r in zip(policy_scores, reference_scores))
    return wins / len(policy_scores)
