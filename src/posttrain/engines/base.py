"""The ``Engine`` protocol every rollout backend implements."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from posttrain.types import SamplingParams

FinishReason = Literal["stop", "length"]


class EngineUnavailableError(RuntimeError):
    """The engine a config names cannot run here (its package is missing, or it has no kernel
    for the model)."""


class EngineRestarted(RuntimeError):
    """The engine's process died during a call and was restarted with its last weights and
    version; the call's work is lost and must be dispatched again."""


@dataclass
class GenerationOutput:
    """One completion: sampled ids, their log-probs under the distribution actually sampled
    from (0.0 for greedy), why it ended, the weight version that produced it, and (an MoE
    engine recording it) the experts of every prompt and completion token."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    version: int
    routing: Any = field(default=None, compare=False, repr=False)  # [T, L, k], as Segment's


@runtime_checkable
class Engine(Protocol):
    """Generates completions, accepts new weights, and can prove which weights it holds: a
    checksum of them and the log-probs it gives to fixed sequences (weight-sync checks)."""

    @property
    def version(self) -> int: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[GenerationOutput]:
        """One completion a prompt. ``seeds[i]`` (default: derived from ``sampling.seed`` and
        ``i``) fixes row ``i``'s random draws, independently of the batch it shares."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None: ...

    def weights_checksum(self) -> str:
        """``weights_checksum`` of the weights the engine holds."""
        ...

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-prob of every token given the ones before it (0.0 for the first), at
        temperature 1."""
        ...


@runtime_checkable
class Sleeper(Protocol):
    """An engine that can share its device with the trainer (``engine.sleep``)."""

    def sleep(self) -> None:
        """Free the memory of the weights (and cache) until the next ``update_weights``,
        which wakes the engine and must send every weight."""
        ...
