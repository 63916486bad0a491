"""The engine ``torch`` (the default): posttrain's own decoder, in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from posttrain.config.family import member
from posttrain.config.section import Device
from posttrain.config.sections.engine import EngineFamily


@member("engine", "torch")
class TorchEngineConfig(EngineFamily):
    """``torch``: ``TorchEngine`` in this process, on ``device`` (``auto``: the first CUDA
    device if any, else the CPU); it records routing for ``trainer.routing_replay``."""

    RECORDS_ROUTING: ClassVar[bool] = True
    device: Device = "auto"

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False) -> Any:
        import torch

        from posttrain.engines.torch_engine import TorchEngine
        from posttrain.models import load_model
        from posttrain.models.devices import resolve_device

        return TorchEngine(model if model is not None else load_model(model_dir, dtype),
                           pad_token_id, eos_token_id,
                           dtype=getattr(torch, dtype), record_routing=record_routing,
                           device=resolve_device(self.device, "engine.device"))
