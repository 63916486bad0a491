# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .aggregation import StepNorm
from .credit import long_success_penalty
from .kl import adaptive_kl_coef
from .metrics import standard_error
from .objectives.divergences import rl_kd_objective
from .objectives.preference import kto_reference_point
from .objectives.value_entropy import AdaptiveEntropyCoef
from .offpolicy import importance_stats
from .registry import (
    KINDS,
    Entry,
    Facts,
    LazyInputs,
    canonical,
    entries,
    entry,
    facts,
    get,
    names,
    register,
)
from .shaping import toggle_budget
from .tensors import group_index, group_stats, importance_ratio

__all__ = [
    "AdaptiveEntropyCoef",
    "adaptive_kl_coef",
    "KINDS",
    "Entry",
    "Facts",
    "LazyInputs",
    "StepNorm",
    "canonical",
    "entries",
    "entry",
    "facts",
    "get",
    "group_index",
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
