"""Layer 3: verifiers and reward composition (reward = dict of named parts)."""

from posttrain.rewards.compose import RewardFunction
from posttrain.rewards.verifiers import VERIFIERS, exact, extract_answer, format_ok, numeric

__all__ = ["VERIFIERS", "RewardFunction", "exact", "extract_answer", "format_ok", "numeric"]
