"""Reward-model losses and graders (docs/algorithms.md). Rule verifiers (exact, numeric,
format) live in ``posttrain.rewards``."""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from posttrain.algos.registry import register
from posttrain.algos.tensors import require_finite

SCORE_PATTERN = r"<score>(-?\d+(?:\.\d+)?)</score>"


@register("reward_model", "bradley_terry",
          source=("Bradley & Terry 1952; RM loss of InstructGPT (Ouyang et al. 2022, "
                  "arXiv 2203.02155) and CharacterFlywheel (arXiv 2603.01973)"))
def bradley_terry(*, chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """``-log sigmoid(r(x, y_c) - r(x, y_r))`` on the scalar head's last-valid-token scores."""
    require_finite("bradley_terry", chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    return -F.logsigmoid(chosen_scores - rejected_scores)


@register("reward_model", "bt_token_span",
          source="DeepSpeed-Chat: Yao et al. 2023, arXiv 2308.01320")
def bt_token_span(
    *, chosen_values: torch.Tensor, rejected_values: torch.Tensor, chosen_ids: torch.Tensor,
    rejected_ids: torch.Tensor, chosen_lengths: torch.Tensor, rejected_lengths: torch.Tensor,
) -> torch.Tensor:
    """Per pair, the mean of ``-log sigmoid(r_c_t - r_r_t)`` over ``t`` in ``[div, end)``: ``div``
    = first position where the responses differ, ``end`` = the longer one's length; identical
    pairs use only the last token. Inputs ``[N, T]`` per token; returns ``[N]``."""
    require_finite("bt_token_span", chosen_values=chosen_values, rejected_values=rejected_values)
    out = []
    for i in range(chosen_ids.shape[0]):
        end = max(int(chosen_lengths[i]), int(rejected_lengths[i]))
        differ = (chosen_ids[i, :end] != rejected_ids[i, :end]).nonzero()
        start = int(differ[0]) if len(differ) else end - 1
        diff = chosen_values[i, start:end] - rejected_values[i, start:end]
        out.append(-F.logsigmoid(diff).mean())
    return torch.stack(out)


@register("reward_model", "pairwise_classifier",
          source="CharacterFlywheel: Nie et al. (Meta) 2026, arXiv 2603.01973")
def pairwise_classifier(*, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``-[t log sigmoid(s) + (1 - t) log(1 - sigmoid(s))]`` for ``s = s(x, y_0, y_1)``."""
    require_finite("pairwise_classifier", scores=scores)
    return F.binary_cross_entropy_with_logits(scores, targets.to(scores.dtype), reduction="none")


@register("reward_model", "pgenrm_pair",
          source=("P-GenRM: Zhang et al. 2026, 'Personalized Generative Reward Model with "
                  "Test-time User-based Scaling', arXiv 2602.12116"))
def pgenrm_pair(
    *, delta: torch.Tensor, user: torch.Tensor, centroid: torch.Tensor, prototype: torch.Tensor,
    lam_cent: float = 0.0, lam_tr: float = 0.0,
) -> torch.Tensor:
    """``L = -log sigmoid(Delta) + lam_cent ||a_j - mu_j||^2 + lam_tr ||a_j - p_j||^2`` with
    ``Delta = z_t^T (y+ - y-)`` (``dL_pair / dDelta = sigmoid(Delta) - 1``), ``a_j`` the user's
    embedding, ``mu_j`` its cluster's centroid and ``p_j`` its prototype; per pair ``[N]``."""
    require_finite("pgenrm_pair", delta=delta, user=user)
    pull = lam_cent * ((user - centroid) ** 2).sum(-1) + lam_tr * ((user - prototype) ** 2).sum(-1)
    return -F.logsigmoid(delta) + pull


@register("reward_model", "genrm",
          source=("P-GenRM: Zhang et al. 2026, arXiv 2602.12116; rubric graders of DeepSeek-V3.2 "
                  "(arXiv 2512.02556) and Kimi K2.5/K3"))
def genrm(
    *, outputs: Sequence[str], score_max: float = 10.0, score_pattern: str = SCORE_PATTERN,
    fallback: float = 0.0,
) -> tuple[float, bool]:
    """A generative grader's score: the last ``score_pattern`` match of each sampled output,
    averaged over those that parse, divided by ``score_max``. A match outside
    ``[0, score_max]`` does not parse (the grader ignored its scale). Returns ``(score,
    parse_failed)``; if none parse, ``(fallback, True)``."""
    parsed = []
    for text in outputs:
        matches = re.findall(score_pattern, text)
        if not matches:
            continue
        last = matches[-1]  # a pattern with several groups: the first is the score
        value = float(last[0] if isinstance(last, tuple) else last)
        if 0 <= value <= score_max:
            parsed.append(value)
    if not parsed:
        return fallback, True
    return sum(parsed) / len(parsed) / score_max, False


@register("reward_model", "group_binary_comparison",
          source=("Kimi K2.5 (arXiv 2602.02276) and Kimi K3 (Moonshot AI 2026) generative reward "
                  "models"))
def group_binary_comparison(
    *, outcomes: torch.Tensor, over_budget: torch.Tensor | None = None
) -> torch.Tensor:
    """Round robin in a group: ``r_i = (wins_i + ties_i / 2) / (G - 1)`` from ``outcomes[i, j]``
    in {1 (i beats j), 0.5, 0} (only ``i < j`` is read). A response over the verbosity budget
    loses to every one within it; two over budget tie."""
    g = outcomes.shape[0]
    if g < 2:
        return torch.zeros(g, dtype=torch.float64)
    score = torch.zeros((g, g), dtype=torch.float64)
    upper = torch.triu(torch.ones((g, g), dtype=torch.bool), diagonal=1)
    score[upper] = outcomes.to(torch.float64)[upper]
    score = score + (1 - score.T) * upper.T
    if over_budget is not None:
        over = over_budget.bool()
        score = torch.where(over[:, None] & ~over[None, :], 0.0, score)
        score = torch.where(~over[:, None] & over[None, :], 1.0, score)
        score = torch.where(over[:, None] & over[None, :], 0.5, score)
    score.fill_diagonal_(0)
    return score.sum(dim=1) / (g - 1)
