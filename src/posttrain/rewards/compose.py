"""Reward as a dict of named parts and their weighted sum."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from posttrain.config.extension import is_path, load_extension
from posttrain.config.sections.reward import ENV, JUDGE, RewardConfig
from posttrain.rewards.registry import FALLIBLE_VERIFIERS, VERIFIERS
from posttrain.rewards.reward_worker import RewardWorker
from posttrain.rewards.synthesis import synthesised
from posttrain.rewards.user_reward import Missing, Sample

logger = logging.getLogger(__name__)


class Scored(NamedTuple):
    """One sample's reward: ``parts`` (a missing part holds 0 until its group fills it in),
    their weighted ``total``, and ``missing``: part -> why it is missing."""

    parts: dict[str, float]
    total: float
    missing: dict[str, str]


@dataclass(frozen=True)
class RewardFunction:
    """``parts[name] = verifier(sample)``; ``reward = sum w * part``.

    ``weights`` maps a part name to ``(verifier, weight)``: a name of ``VERIFIERS`` or a dotted path
    to a reward function (``user_reward``; several parts may name one function and take entries of
    its dict by ``keys[part]``; it is called once a sample, in a worker process that ``timeout_s``
    bounds a batch of: ``reward_worker``). A built-in verifier that raises or returns a non-finite
    value scores 0: bad model output never crashes a run; one that returns None (``math``: a
    reference it cannot parse) leaves the part missing, as does a reward function that fails
    (``user_reward``); a part's first miss is logged as a warning with its reason. The verifier
    ``env`` takes the part from the episode's own environment verdict (``env_parts``); without one
    it scores 0. A ``judge`` part scores 0 here and is filled in after the rollout by its judge.
    With ``synthesis`` ``(name, {input: part})`` the reward is that catalogue function of the parts
    instead of their weighted sum (``grs``; ``rewards.synthesis``). ``fallible_parts``: the parts
    that can be missing (reward functions, ``math``, judges).
    """

    weights: Mapping[str, tuple[str, float]]
    keys: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    synthesis: tuple[str, Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        functions: dict[str, RewardWorker] = {}
        for name, (verifier, _) in self.weights.items():
            if is_path(verifier):
                if verifier not in functions:
                    load_extension("reward", verifier)  # a bad path fails here, not later
                    functions[verifier] = RewardWorker(verifier, self.timeout_s)
            elif verifier not in VERIFIERS and verifier not in (ENV, JUDGE):
                raise ValueError(f"reward part {name!r}: unknown verifier {verifier!r}; "
                                 f"known: {', '.join(sorted([*VERIFIERS, ENV, JUDGE]))}")
        object.__setattr__(self, "_functions", functions)
        object.__setattr__(self, "_warned", set())  # parts whose first failure was logged
        object.__setattr__(self, "_user", {n for n, (v, _) in self.weights.items()
                                           if is_path(v)})  # parts a reward function scores
        object.__setattr__(self, "fallible_parts", [  # the parts that can be missing
            n for n, (v, _) in self.weights.items()
            if n in self._user or v in FALLIBLE_VERIFIERS or v == JUDGE])

    @classmethod
    def of(cls, reward: RewardConfig) -> RewardFunction:
        """The reward function ``reward``'s parts, keys, timeout and synthesis describe."""
        synthesis = None if reward.synthesis is None else (reward.synthesis.name,
                                                           dict(reward.synthesis.inputs))
        return cls({n: (p.verifier, p.weight) for n, p in reward.parts.items()},
                   {n: p.key for n, p in reward.parts.items() if p.key is not None},
                   reward.timeout_s, synthesis)

    def __reduce__(self):  # rebuilt from the spec (a file-loaded function pickles badly)
        return RewardFunction, (dict(self.weights), dict(self.keys), self.timeout_s, self.synthesis)

    def __call__(self, completion: str, reference: str,
                 env_parts: Mapping[str, float] | None = None) -> Scored:
        """One sample known by its text and reference only."""
        return self.score([Sample(completion, reference)], [env_parts])[0]

    def score(self, samples: Sequence[Sample],
              env_parts: Sequence[Mapping[str, float] | None] | None = None) -> list[Scored]:
        """Every part of every sample; each reward function is called once for the batch (a
        batched one) or once a sample."""
        env_parts = env_parts or [None] * len(samples)
        given = {path: fn(samples) for path, fn in self._functions.items()}
        out = []
        for j, sample in enumerate(samples):
            parts: dict[str, float] = {}
            missing: dict[str, str] = {}
            for name, (verifier, _) in self.weights.items():
                if name in self._user:
                    value = given[verifier][j]
                    if isinstance(value, dict):
                        key = self.keys.get(name)
                        value = value.get(key, Missing(f"its dict has no entry {key!r}")) \
                            if key else Missing("returned a dict: set the part's key")
                    elif name in self.keys:
                        value = Missing(f"returned a number, not a dict with {self.keys[name]!r}")
                else:
                    value = self._built_in(name, verifier, sample, env_parts[j])
                if isinstance(value, Missing):
                    missing[name] = value.reason
                    self._warn_once(name, value.reason)
                    value = 0.0
                parts[name] = value
            out.append(Scored(parts, self.total(parts), missing))
        return out

    def _warn_once(self, part: str, why: str) -> None:
        if part not in self._warned:
            self._warned.add(part)
            logger.warning("reward part %r is missing for a sample: %s (later ones are "
                           "counted in reward/%s/missing and recorded in each episode)",
                           part, why, part)

    def _built_in(self, name: str, verifier: str, sample: Sample,
                  env: Mapping[str, float] | None) -> float | Missing:
        if verifier == ENV:
            if env is not None and name not in env:
                raise KeyError(f"reward part {name!r}: the environment gives only {', '.join(env)}")
            return float((env or {}).get(name, 0.0))
        if verifier == JUDGE:
            return 0.0
        try:
            value = VERIFIERS[verifier](sample.completion, sample.reference)
        except Exception:  # a verifier must not take the run down; the part scores 0
            return 0.0
        if value is None:
            return Missing(f"{verifier} cannot read the reference {sample.reference[:80]!r}")
        value = float(value)
        return value if math.isfinite(value) else 0.0

    def episode_meta(self, scored: Scored) -> dict:
        """What an episode records of its scoring: the parts that can be missing, and the
        missing ones with their reasons (``rollout.missing`` fills them from the group)."""
        meta: dict = {}
        if self.fallible_parts:
            meta["fallible_parts"] = list(self.fallible_parts)  # the episode's own
        if scored.missing:
            meta["missing_parts"] = list(scored.missing)
            meta["missing_reasons"] = dict(scored.missing)
        return meta

    @property
    def part_weights(self) -> dict[str, float]:
        return {name: weight for name, (_, weight) in self.weights.items()}

    def total(self, parts: Mapping[str, float]) -> float:
        """The reward of scored ``parts``: ``sum w * part``, or their ``synthesis``."""
        if self.synthesis is not None:
            return synthesised(*self.synthesis, parts)
        return sum(parts[n] * w for n, w in self.part_weights.items())
