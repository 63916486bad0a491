"""Sampling parameters understood by every engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """How an engine samples a completion.

    ``temperature == 0`` means greedy decoding. ``top_p == 1`` and ``top_k == 0`` disable
    truncation. Log-probs returned by an engine are always under the distribution actually
    sampled from (after temperature and truncation).
    """

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of training step ``step`` of a run seeded ``seed``."""
    return (seed * 1_000_003 + step) % 2**62
