"""``PolicyTrainer``: what the RL and distillation recipes need of the policy's trainer. The
in-process ``Trainer`` and ``cluster.RayTrainer`` (the trainer as a Ray actor) both implement
it (tests/conformance/test_trainer_protocol.py); recipes type against it, so where the trainer
runs is a choice made in ``recipes.build``, not an ``if`` in a loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from posttrain.types import Batch

R = TypeVar("R")


@runtime_checkable
class PolicyTrainer(Protocol):
    @property
    def model(self) -> torch.nn.Module: ...

    def compute_logprobs(self, batch: Batch, temperature: float = 1.0, reference: bool = False,
                         top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
        """Log-probs of ``batch``'s loss-mask tokens (0 elsewhere), under the policy or the
        frozen ``reference``, over the ``top_k``/``top_p`` support the engine sampled from."""

    def apply(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(trainer, *args, **kwargs)`` on the ``Trainer`` itself, where it lives: an
        objective's optimiser steps (``policy_steps``, ``sft_step``, ...)."""

    def named_weights(self) -> Iterable[tuple[str, torch.Tensor]]:
        """The whole (merged, unsharded) weights an engine loads."""

    def export_model(self) -> torch.nn.Module:
        """The policy as a plain ``from_pretrained`` model with whole weights."""

    def state_dict(self, optimizer: bool = True) -> dict:
        """Everything a checkpoint needs to resume exactly besides the weights (and, without
        ``optimizer``, besides the optimiser's state)."""

    def load_state_dict(self, state: dict) -> None: ...
