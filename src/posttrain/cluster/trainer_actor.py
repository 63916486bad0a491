"""The policy trainer as a Ray actor, behind the part of ``Trainer`` the pipelines use.

``TrainerActor`` holds a ``Trainer`` in its own process. ``RayTrainer`` is the driver's handle:
``compute_logprobs``, ``rl_update``, ``sft_step``, ``named_weights``, ``state_dict`` /
``load_state_dict`` and ``kl_coef`` become remote calls. ``export_model`` (and ``model``) is a
driver-side copy of the actor's model, refreshed from the actor's weights on every call
(checkpoints and the stage's end read it).
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.settings import ActorConfig, KLConfig, OffPolicyConfig, OptimConfig, TrainerConfig
from posttrain.train import Trainer
from posttrain.types import Batch


class TrainerActor:
    def __init__(self, model: torch.nn.Module, optim: OptimConfig, total_steps: int,
                 settings: TrainerConfig, ref_model: torch.nn.Module | None,
                 threads: int) -> None:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        self.trainer = Trainer(model, optim, total_steps, settings, ref_model=ref_model)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.trainer, method)(*args, **kwargs)

    def get(self, name: str) -> Any:
        return getattr(self.trainer, name)

    def set(self, name: str, value: Any) -> None:
        setattr(self.trainer, name, value)

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, t.clone()) for n, t in self.trainer.named_weights()]


class RayTrainer:
    """Driver-side handle of a ``TrainerActor``."""

    def __init__(self, model: torch.nn.Module, optim: OptimConfig, total_steps: int,
                 settings: TrainerConfig | None = None,
                 ref_model: torch.nn.Module | None = None, threads: int | None = None,
                 num_cpus: float = 0) -> None:
        """``model`` is sent to the actor and stays the driver-side copy; ``threads``: torch
        threads of the actor (default: this process's)."""
        import ray

        self._ray = ray
        actor_cls = ray.remote(TrainerActor)
        self.actor = actor_cls.options(num_cpus=num_cpus).remote(
            model, optim, total_steps, settings or TrainerConfig(), ref_model,
            threads or torch.get_num_threads())
        self._model = model

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._ray.get(self.actor.call.remote(method, *args, **kwargs))

    def export_model(self) -> torch.nn.Module:
        """The driver-side model, refreshed with the actor's weights."""
        self._model.load_state_dict(self._ray.get(self.actor.weights.remote()))
        return self._model

    @property
    def model(self) -> torch.nn.Module:
        return self.export_model()

    @property
    def kl_coef(self) -> float | None:
        return self._ray.get(self.actor.get.remote("kl_coef"))

    @kl_coef.setter
    def kl_coef(self, value: float | None) -> None:
        self._ray.get(self.actor.set.remote("kl_coef", value))

    def compute_logprobs(self, batch: Batch, temperature: float = 1.0,
                         reference: bool = False) -> torch.Tensor:
        return self._call("compute_logprobs", batch, temperature, reference)

    def rl_update(self, batch: Batch, actor: ActorConfig | None = None, *,
                  kl: KLConfig | None = None, offpolicy: OffPolicyConfig | None = None,
                  epochs: int = 1, mini_batches: int = 1, temperature: float = 1.0,
                  max_len: int | None = None) -> dict[str, float]:
        return self._call("rl_update", batch, actor, kl=kl, offpolicy=offpolicy, epochs=epochs,
                          mini_batches=mini_batches, temperature=temperature, max_len=max_len)

    def sft_step(self, batch: Batch) -> dict[str, float]:
        return self._call("sft_step", batch)

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return self._ray.get(self.actor.named_weights.remote())

    def state_dict(self) -> dict:
        return self._call("state_dict")

    def load_state_dict(self, state: dict) -> None:
        self._call("load_state_dict", state)
