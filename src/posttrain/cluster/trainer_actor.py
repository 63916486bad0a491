"""The policy trainer as a Ray actor, behind the part of ``Trainer`` the pipelines use.

``TrainerActor`` holds a ``Trainer`` in its own process. ``RayTrainer`` is the driver's handle:
``apply(fn, ...)`` ships ``fn`` (an objective's steps) to the actor and runs it on the ``Trainer``
there; ``compute_logprobs``, ``named_weights``, ``state_dict`` / ``load_state_dict`` are such calls.
``export_model`` (and ``model``) is a driver-side copy of the actor's model, refreshed from the
actor's weights on every call (checkpoints and the stage's end read it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.train import Trainer
from posttrain.types import Batch

R = TypeVar("R")


class TrainerActor:
    def __init__(self, model: torch.nn.Module, optim: OptimConfig, total_steps: int,
                 settings: TrainerConfig, ref_model: torch.nn.Module | None, threads: int) -> None:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        self.trainer = Trainer(model, optim, total_steps, settings, ref_model=ref_model)

    def apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self.trainer, *args, **kwargs)

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, t.clone()) for n, t in self.trainer.named_weights()]


class RayTrainer:
    """Driver-side handle of a ``TrainerActor``. Its actor trains no add-ons (the config
    refuses ``dist.trainer_actor`` with one), so a checkpoint saves none beside the model."""

    addons = ()

    def __init__(self, model: torch.nn.Module, optim: OptimConfig, total_steps: int,
                 settings: TrainerConfig | None = None, ref_model: torch.nn.Module | None = None,
                 threads: int | None = None, num_cpus: float = 0) -> None:
        """``model`` is sent to the actor and stays the driver-side copy; ``threads``: torch
        threads of the actor (default: this process's)."""
        import ray

        self._ray, self._model = ray, model
        self.actor = ray.remote(TrainerActor).options(num_cpus=num_cpus).remote(
            model, optim, total_steps, settings or TrainerConfig(), ref_model,
            threads or torch.get_num_threads())

    def apply(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self._ray.get(self.actor.apply.remote(fn, *args, **kwargs))

    def export_model(self) -> torch.nn.Module:
        """The driver-side model, refreshed with the actor's weights."""
        self._model.load_state_dict(self._ray.get(self.actor.weights.remote()))
        return self._model

    @property
    def model(self) -> torch.nn.Module:
        return self.export_model()

    def compute_logprobs(self, batch: Batch, temperature: float = 1.0, reference: bool = False,
                         top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
        return self.apply(Trainer.compute_logprobs, batch, temperature, reference, top_k, top_p)

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return self._ray.get(self.actor.named_weights.remote())

    def state_dict(self, optimizer: bool = True) -> dict:
        return self.apply(Trainer.state_dict, optimizer)

    def load_state_dict(self, state: dict) -> None:
        self.apply(Trainer.load_state_dict, state)
