"""The token record of one segment: ids, text and per-token training fields, appended only."""

from __future__ import annotations

from dataclasses import dataclass, field

from posttrain.types import Segment, StepSpan


@dataclass
class Trace:
    """``ids`` as given to the engine; ``add`` appends sampled tokens (``logprobs`` given: loss
    mask 1) or scaffold (mask 0). The starting ids are context (mask 0)."""

    ids: list[int]
    text: str
    mask: list[int] = field(init=False)
    logprobs: list[float] = field(init=False)
    versions: list[int] = field(init=False)
    steps: list[StepSpan] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.mask, self.logprobs, self.versions = [0] * n, [0.0] * n, [-1] * n

    def add(self, ids: list[int], text: str, logprobs: list[float] | None = None,
            version: int = -1) -> None:
        sampled = logprobs is not None
        self.ids += ids
        self.text += text
        self.mask += [int(sampled)] * len(ids)
        self.logprobs += list(logprobs) if sampled else [0.0] * len(ids)
        self.versions += [version if sampled else -1] * len(ids)

    def segment(self) -> Segment:
        return Segment(list(self.ids), list(self.mask), list(self.logprobs),
                       list(self.versions), list(self.steps))
