"""The ``Engine`` protocol every rollout backend implements."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch

from posttrain.types import SamplingParams

FinishReason = Literal["stop", "length"]


@dataclass
class GenerationOutput:
    """One completion: sampled ids, their log-probs under the distribution actually sampled
    from (0.0 for greedy), why it ended, and the weight version that produced it."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    version: int


@runtime_checkable
class Engine(Protocol):
    """Generates completions and accepts new weights."""

    @property
    def version(self) -> int: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[GenerationOutput]: ...

    def update_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int
    ) -> None: ...
