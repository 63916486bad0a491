"""Episodes: the exact tokens an engine produced, with everything training needs.

An ``Episode`` is one rollout (one prompt, one completion, possibly many turns). It holds one or
more ``Segment``s — the token sequences the trainer sees (compaction splits an episode into
several segments that share its reward). The episodes sampled for one prompt share a
``group_id``: the unit of group-relative advantages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepSpan:
    """Half-open token range ``[start, end)`` of one agent step inside a segment."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"invalid step span [{self.start}, {self.end})")


@dataclass
class Segment:
    """One token sequence the trainer sees.

    ``token_ids`` are the exact ids (prompt and completion); ``loss_mask[t] == 1`` only on tokens
    the policy sampled. ``logprobs[t]`` is the behaviour log-prob of token ``t`` (0.0 where the
    mask is 0) and ``versions[t]`` the weight version that sampled it (-1 where the mask is 0).
    ``routing`` (mixture-of-experts models, when the engine records it): ``[T, L, k]`` the
    experts each router sent token ``t`` to as the engine processed it (-1: not processed);
    kept in memory for the trainer's replay, not written with the episode.
    """

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    versions: list[int]
    steps: list[StepSpan] = field(default_factory=list)
    routing: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        for name in ("loss_mask", "logprobs", "versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Segment.{name} has length {len(getattr(self, name))}, "
                                 f"token_ids has {n}")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("Segment.loss_mask must hold only 0 and 1")
        if n and self.loss_mask[0] == 1:
            raise ValueError("Segment.loss_mask[0] must be 0: the first token has no context")
        for span in self.steps:
            if span.end > n:
                raise ValueError(f"step span [{span.start}, {span.end}) exceeds length {n}")
        if self.routing is not None and len(self.routing) != n:
            raise ValueError(f"Segment.routing has length {len(self.routing)}, token_ids has {n}")

    @classmethod
    def from_prompt_completion(cls, prompt_ids: list[int], completion_ids: list[int],
                               completion_logprobs: list[float] | None = None,
                               version: int | list[int] = 0, routing: Any = None) -> Segment:
        """A single-turn segment: prompt tokens unmasked, completion tokens trainable;
        ``version`` is one weight version for every completion token or one per token;
        ``routing`` the engine's (``GenerationOutput.routing``)."""
        if not prompt_ids:
            raise ValueError("prompt_ids must not be empty")
        n_p, n_c = len(prompt_ids), len(completion_ids)
        lp = [0.0] * n_c if completion_logprobs is None else list(completion_logprobs)
        if len(lp) != n_c:
            raise ValueError("completion_logprobs and completion_ids differ in length")
        return cls(token_ids=list(prompt_ids) + list(completion_ids),
                   loss_mask=[0] * n_p + [1] * n_c, logprobs=[0.0] * n_p + [float(x) for x in lp],
                   versions=[-1] * n_p + ([int(v) for v in version] if isinstance(version, list)
                                          else [version] * n_c),
                   steps=[StepSpan(n_p, n_p + n_c)], routing=routing)

    @property
    def num_trainable(self) -> int:
        return sum(self.loss_mask)

    @property
    def first_sampled(self) -> int:
        """Where the first trained token is (the length when none is): what comes before is
        the prompt."""
        return next((t for t, m in enumerate(self.loss_mask) if m), len(self.token_ids))

    def to_dict(self) -> dict:
        return {"token_ids": self.token_ids, "loss_mask": self.loss_mask,
                "logprobs": self.logprobs, "versions": self.versions,
                "steps": [[s.start, s.end] for s in self.steps]}

    @classmethod
    def from_dict(cls, d: dict) -> Segment:
        return cls(token_ids=[int(t) for t in d["token_ids"]],
                   loss_mask=[int(m) for m in d["loss_mask"]],
                   logprobs=[float(x) for x in d["logprobs"]],
                   versions=[int(v) for v in d["versions"]],
                   steps=[StepSpan(int(a), int(b)) for a, b in d.get("steps", [])])


@dataclass
class Episode:
    """One rollout: its segments, named reward parts, and bookkeeping.

    ``rewards`` maps reward-part names to floats; ``reward`` is their weighted sum as set by the
    reward function (stored, so the weights that produced it are never ambiguous). An external
    agent's session whose agent reported its own reward has the one part ``agent``.
    """

    segments: list[Segment]
    rewards: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    group_id: str = ""
    finish_reason: str = "stop"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("an Episode needs at least one Segment")
        if not math.isfinite(self.reward):
            raise ValueError(f"Episode.reward must be finite, got {self.reward}")

    def score(self, part: str) -> float:
        """Reward part ``part``, or the reward an external agent reported for its session
        (part ``agent``), which then stands for every part (0 when neither is there)."""
        return self.rewards.get(part, self.rewards.get("agent", 0.0))

    def to_dict(self) -> dict:
        return {"segments": [s.to_dict() for s in self.segments], "rewards": dict(self.rewards),
                "reward": self.reward, "group_id": self.group_id,
                "finish_reason": self.finish_reason, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict) -> Episode:
        return cls(segments=[Segment.from_dict(s) for s in d["segments"]],
                   rewards={str(k): float(v) for k, v in d.get("rewards", {}).items()},
                   reward=float(d.get("reward", 0.0)), group_id=str(d.get("group_id", "")),
                   finish_reason=str(d.get("finish_reason", "stop")), meta=dict(d.get("meta", {})))
