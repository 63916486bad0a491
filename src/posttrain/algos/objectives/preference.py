"""Preference optimisation (docs/algorithms.md). ``chosen_logp``/``rejected_logp`` are summed
sequence log-probs under the policy (prompt tokens masked), ``ref_*`` the same under the
reference; ``h = (chosen - ref_chosen) - (rejected - ref_rejected)``. Each returns the loss a
pair ``[N]``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posttrain.algos.registry import register
from posttrain.algos.tensors import require_finite


def _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, where: str):
    require_finite(where, chosen_logp=chosen_logp, rejected_logp=rejected_logp,
                   ref_chosen_logp=ref_chosen_logp, ref_rejected_logp=ref_rejected_logp)
    return (chosen_logp - ref_chosen_logp) - (rejected_logp - ref_rejected_logp)


@register("preference", "dpo", aliases=("sigmoid",),
          source="DPO: Rafailov et al. 2023, arXiv 2305.18290")
def dpo(
    *, chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor, beta: float = 0.1,
) -> torch.Tensor:
    """``-log sigmoid(beta h)``. ``step_dpo`` is this on one reasoning step."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, "dpo")
    return -F.logsigmoid(beta * h)


@register("preference", "ipo",
          source=("IPO: Azar et al. 2023, 'A General Theoretical Paradigm to Understand Learning "
                  "from Human Preferences', arXiv 2310.12036"))
def ipo(
    *, chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor, tau: float = 0.1,
) -> torch.Tensor:
    """``(h - 1 / (2 tau))^2`` (TRL averages log-probs per token first; pass them so)."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, "ipo")
    return (h - 1 / (2 * tau)) ** 2


@register("preference", "r_dpo",
          source=("R-DPO: Park et al. 2024, 'Disentangling Length from Quality in DPO', "
                  "arXiv 2403.19159 (length term inside the sigmoid)"))
def r_dpo(
    *, chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor, chosen_length: torch.Tensor, rejected_length: torch.Tensor,
    alpha: float, beta: float = 0.1,
) -> torch.Tensor:
    """``-log sigmoid(beta h + alpha (|y_w| - |y_l|))``."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, "r_dpo")
    return -F.logsigmoid(beta * h + alpha * (chosen_length - rejected_length))


@register("preference", "simpo", source="SimPO: Meng et al. 2024, arXiv 2405.14734")
def simpo(
    *, chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, chosen_length: torch.Tensor,
    rejected_length: torch.Tensor, beta: float = 2.0, gamma: float = 0.5,
) -> torch.Tensor:
    """``-log sigmoid(beta / |y_w| l_w - beta / |y_l| l_l - gamma)``; no reference model."""
    require_finite("simpo", chosen_logp=chosen_logp, rejected_logp=rejected_logp)
    if bool((chosen_length <= 0).any()) or bool((rejected_length <= 0).any()):
        raise ValueError("simpo: a response of length 0")
    return -F.logsigmoid(beta * chosen_logp / chosen_length
                         - beta * rejected_logp / rejected_length - gamma)


@register("preference", "kto", source="KTO: Ethayarajh et al. 2024, arXiv 2402.01306")
def kto(
    *, logp: torch.Tensor, ref_logp: torch.Tensor, desirable: torch.Tensor,
    reference_point: torch.Tensor | float = 0.0, beta: float = 0.1, lambda_d: float = 1.0,
    lambda_u: float = 1.0,
) -> torch.Tensor:
    """``w(y) (1 - v)``: ``r = beta log(pi / pi_ref)``; ``v = sigmoid(r - z_ref)`` for desirable
    ``y`` (weight ``lambda_D``), ``sigmoid(z_ref - r)`` for undesirable (``lambda_U``).
    ``kto_reference_point`` estimates ``z_ref``."""
    require_finite("kto", logp=logp, ref_logp=ref_logp)
    r = beta * (logp - ref_logp)
    good = desirable.bool()
    v = torch.where(good, torch.sigmoid(r - reference_point), torch.sigmoid(reference_point - r))
    return torch.where(good, lambda_d, lambda_u) * (1 - v)


def kto_reference_point(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float = 0.1):
    """``z_ref = beta KL``, estimated on mismatched in-batch (prompt, response) pairs, clamped at
    0 and detached."""
    return (beta * (logp - ref_logp).mean()).clamp(min=0).detach()


@register("preference", "orpo", source="ORPO: Hong et al. 2024, arXiv 2403.07691")
def orpo(
    *, chosen_mean_logp: torch.Tensor, rejected_mean_logp: torch.Tensor, lam: float = 0.1
) -> torch.Tensor:
    """``-l_w + lam (-log sigmoid(log odds_w - log odds_l))`` with token-mean log-probs ``l``
    and ``log odds = l - log1p(-exp(l))``."""
    require_finite("orpo", chosen_mean_logp=chosen_mean_logp,
                   rejected_mean_logp=rejected_mean_logp)

    def log_odds(lp: torch.Tensor) -> torch.Tensor:
        return lp - torch.log1p(-lp.exp())

    ratio = -F.logsigmoid(log_odds(chosen_mean_logp) - log_odds(rejected_mean_logp))
    return -chosen_mean_logp + lam * ratio


@register("preference", "cpo", source="CPO: Xu et al. 2024, arXiv 2401.08417")
def cpo(
    *, chosen_logp: torch.Tensor, rejected_logp: torch.Tensor, beta: float = 0.1, lam: float = 1.0,
) -> torch.Tensor:
    """``-log sigmoid(beta (l_w - l_l)) - lam l_w``: uniform reference plus the chosen NLL
    (summed; TRL averages per token)."""
    require_finite("cpo", chosen_logp=chosen_logp, rejected_logp=rejected_logp)
    return -F.logsigmoid(beta * (chosen_logp - rejected_logp)) - lam * chosen_logp
