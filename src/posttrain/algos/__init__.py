"""Layer 1: the algorithm catalogue — pure tensor functions under their ALGORITHMS.md names.

``get(kind, name)`` returns a function (aliases and ``-``/``_`` spellings accepted),
``names(kind)`` lists a kind; arguments are keyword tensors named as in the spec.
"""

from posttrain.algos import (  # noqa: F401  (importing registers the entries)
    advantages,
    aggregation,
    credit,
    kl,
    metrics,
    multi_reward,
    offpolicy,
    shaping,
)
from posttrain.algos.aggregation import StepNorm
from posttrain.algos.credit import long_success_penalty
from posttrain.algos.kl import adaptive_kl_coef
from posttrain.algos.metrics import standard_error
from posttrain.algos.objectives import (  # noqa: F401
    divergences,
    is_losses,
    policy_losses,
    preference,
    reward_models,
    value_entropy,
)
from posttrain.algos.objectives.divergences import rl_kd_objective
from posttrain.algos.objectives.preference import kto_reference_point
from posttrain.algos.objectives.value_entropy import AdaptiveEntropyCoef
from posttrain.algos.offpolicy import importance_stats
from posttrain.algos.registry import (
    KINDS,
    Entry,
    LazyInputs,
    canonical,
    entries,
    entry,
    get,
    names,
    register,
)
from posttrain.algos.shaping import toggle_budget
from posttrain.algos.tensors import group_stats, importance_ratio

__all__ = [
    "AdaptiveEntropyCoef",
    "adaptive_kl_coef",
    "KINDS",
    "Entry",
    "LazyInputs",
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
    "toggle_budget",
]
