"""Reward as a dict of named parts and their weighted sum."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from posttrain.rewards.registry import VERIFIERS


@dataclass(frozen=True)
class RewardFunction:
    """``parts[name] = VERIFIERS[verifier](completion, reference)``; ``reward = sum w * part``.

    ``weights`` maps a part name to ``(verifier name, weight)``. A verifier that raises or
    returns a non-finite value scores 0 for that part: bad model output never crashes a run.
    """

    weights: Mapping[str, tuple[str, float]]

    def __post_init__(self) -> None:
        for name, (verifier, _) in self.weights.items():
            if verifier not in VERIFIERS:
                raise ValueError(
                    f"reward part {name!r}: unknown verifier {verifier!r}; "
                    f"known: {', '.join(sorted(VERIFIERS))}"
                )

    def __call__(self, completion: str, reference: str) -> tuple[dict[str, float], float]:
        parts: dict[str, float] = {}
        for name, (verifier, _) in self.weights.items():
            try:
                value = float(VERIFIERS[verifier](completion, reference))
            except Exception:  # a verifier must not take the run down; the part scores 0
                value = 0.0
            parts[name] = value if math.isfinite(value) else 0.0
        total = sum(parts[n] * w for n, (_, w) in self.weights.items())
        return parts, total
