"""Reward as a dict of named parts and their weighted sum."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from posttrain.rewards.registry import VERIFIERS
from posttrain.settings.extension import is_path, load_extension

ENV = "env"  # the verifier name of a part the episode's environment scores
JUDGE = "judge"  # ... and of a part a judge scores after the rollout (rollout.judged)


@dataclass(frozen=True)
class RewardFunction:
    """``parts[name] = verifier(completion, reference)``; ``reward = sum w * part``.

    ``weights`` maps a part name to ``(verifier, weight)``: a name of ``VERIFIERS`` or a dotted
    path to a reward function (docs/extending.md). A verifier that raises or
    returns a non-finite value scores 0 for that part: bad model output never crashes a run.
    The verifier ``env`` takes the part from ``env_parts``, the verdict of the episode's own
    environment (hidden tests, a submission penalty); without one it scores 0. A ``judge``
    part scores 0 here and is filled in after the rollout by its judge.
    """

    weights: Mapping[str, tuple[str, float]]

    def __post_init__(self) -> None:
        functions = {}
        for name, (verifier, _) in self.weights.items():
            if is_path(verifier):
                functions[name] = load_extension("reward", verifier)
            elif verifier in VERIFIERS:
                functions[name] = VERIFIERS[verifier]
            elif verifier not in (ENV, JUDGE):
                raise ValueError(
                    f"reward part {name!r}: unknown verifier {verifier!r}; "
                    f"known: {', '.join(sorted([*VERIFIERS, ENV, JUDGE]))}"
                )
        object.__setattr__(self, "_functions", functions)

    def __reduce__(self):  # rebuilt from the weights (a file-loaded function pickles badly)
        return RewardFunction, (dict(self.weights),)

    def __call__(self, completion: str, reference: str,
                 env_parts: Mapping[str, float] | None = None) -> tuple[dict[str, float], float]:
        parts: dict[str, float] = {}
        for name, (verifier, _) in self.weights.items():
            if verifier == ENV:
                if env_parts is not None and name not in env_parts:
                    raise KeyError(f"reward part {name!r}: the environment gives only "
                                   f"{', '.join(env_parts)}")
                parts[name] = float((env_parts or {}).get(name, 0.0))
                continue
            if verifier == JUDGE:
                parts[name] = 0.0
                continue
            try:
                value = float(self._functions[name](completion, reference))
            except Exception:  # a verifier must not take the run down; the part scores 0
                value = 0.0
            parts[name] = value if math.isfinite(value) else 0.0
        return parts, self.total(parts)

    @property
    def part_weights(self) -> dict[str, float]:
        """Each part's weight."""
        return {name: weight for name, (_, weight) in self.weights.items()}

    def total(self, parts: Mapping[str, float]) -> float:
        """``sum w * part``: the reward of scored ``parts``."""
        return sum(parts[n] * w for n, w in self.part_weights.items())
