"""Layer 1: the algorithm catalogue — pure tensor functions under their ALGORITHMS.md names.

``get(kind, name)`` returns a function (aliases and ``-``/``_`` spellings accepted),
``names(kind)`` lists a kind; arguments are keyword tensors named as in the spec.
"""

from posttrain.algos import (  # noqa: F401  (importing registers the entries)
    advantages,
    aggregation,
    credit,
    divergences,
    is_losses,
    kl,
    metrics,
    multi_reward,
    offpolicy,
    policy_losses,
    preference,
    reward_models,
    shaping,
    value_entropy,
)
from posttrain.algos.aggregation import StepNorm
from posttrain.algos.credit import long_success_penalty
from posttrain.algos.divergences import rl_kd_objective
from posttrain.algos.kl import adaptive_kl_coef
from posttrain.algos.metrics import standard_error
from posttrain.algos.offpolicy import importance_stats
from posttrain.algos.preference import kto_reference_point
from posttrain.algos.registry import KINDS, Entry, canonical, entries, entry, get, names, register
from posttrain.algos.shaping import effort_system_prompt, toggle_budget
from posttrain.algos.tensors import group_stats, importance_ratio
from posttrain.algos.value_entropy import AdaptiveEntropyCoef

__all__ = [
    "AdaptiveEntropyCoef",
    "adaptive_kl_coef",
    "KINDS",
    "Entry",
    "StepNorm",
    "canonical",
    "entries",
    "entry",
    "get",
    "group_stats",
    "importance_ratio",
    "importance_stats",
    "long_success_penalty",
    "names",
    "kto_reference_point",
    "register",
    "standard_error",
    "rl_kd_objective",
    "effort_system_prompt",
    "toggle_budget",
]
