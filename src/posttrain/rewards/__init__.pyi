# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .compose import RewardFunction
from .registry import VERIFIERS
from .rule_verifiers import gsm8k_gold, parse_numeric, tau_product
from .verifiers import exact, extract_answer, format_ok, numeric

__all__ = [
    "VERIFIERS",
    "RewardFunction",
    "exact",
    "extract_answer",
    "format_ok",
    "gsm8k_gold",
    "numeric",
    "parse_numeric",
    "tau_product",
]
