"""Layer 3: verifiers and reward composition (reward = dict of named parts)."""

from posttrain.rewards.compose import ENV, JUDGE, RewardFunction
from posttrain.rewards.registry import VERIFIERS
from posttrain.rewards.rule_verifiers import gsm8k_gold, parse_numeric, tau_product
from posttrain.rewards.verifiers import exact, extract_answer, format_ok, numeric

__all__ = [
    "ENV",
    "JUDGE",
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
