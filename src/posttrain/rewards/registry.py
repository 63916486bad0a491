"""Every verifier by the name a reward part's config uses."""

from __future__ import annotations

from posttrain.rewards.math_verifier import math_answer, math_equiv
from posttrain.rewards.reasoning_gym import reasoning_gym_score
from posttrain.rewards.rule_verifiers import RULE_VERIFIERS
from posttrain.rewards.verifiers import Verifier, exact, format_ok, numeric

# short names of the quickstart, then the spec's rule verifiers (ALGORITHMS.md §9)
VERIFIERS: dict[str, Verifier] = {"exact": exact, "numeric": numeric, "format": format_ok,
                                  "math": math_answer, **RULE_VERIFIERS,
                                  "math_equiv": math_equiv, "reasoning_gym": reasoning_gym_score}
FALLIBLE_VERIFIERS = ("math", "numeric")  # those that may leave a part missing (None)
