"""``PolicyTrainer``: what the RL and distillation recipes need of the policy's trainer. The
in-process ``Trainer`` and ``cluster.RayTrainer`` (the trainer as a Ray actor) both implement
it (tests/conformance/test_trainer_protocol.py); recipes type against it, so where the trainer
runs is a choice made in ``recipes.build``, not an ``if`` in a loop."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch

from posttrain.settings import ActorConfig, KLConfig, OffPolicyConfig
from posttrain.types import Batch


@runtime_checkable
class PolicyTrainer(Protocol):
    kl_coef: float | None  # the adaptive KL controller's coefficient (None: the config's)

    @property
    def model(self) -> torch.nn.Module: ...

    def compute_logprobs(self, batch: Batch, temperature: float = 1.0,
                         reference: bool = False) -> torch.Tensor:
        """Log-probs of ``batch``'s loss-mask tokens (0 elsewhere), under the policy or the
        frozen ``reference``."""

    def rl_update(self, batch: Batch, actor: ActorConfig | None = None, *,
                  kl: KLConfig | None = None, offpolicy: OffPolicyConfig | None = None,
                  epochs: int = 1, mini_batches: int = 1, temperature: float = 1.0,
                  max_len: int | None = None) -> dict[str, float]:
        """``epochs x mini_batches`` optimiser steps of the RL loss on ``batch`` (with its
        advantages); mean metrics."""

    def sft_step(self, batch: Batch) -> dict[str, float]:
        """One optimiser step of next-token loss on ``batch``'s loss-mask tokens."""

    def named_weights(self) -> Iterable[tuple[str, torch.Tensor]]:
        """The whole (merged, unsharded) weights an engine loads."""

    def export_model(self) -> torch.nn.Module:
        """The policy as a plain ``from_pretrained`` model with whole weights."""

    def state_dict(self) -> dict:
        """Everything a checkpoint needs to resume exactly besides the weights."""

    def load_state_dict(self, state: dict) -> None: ...
