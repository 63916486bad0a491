"""The engine ``torch`` (the default): posttrain's own decoder, in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.section import Device
from posttrain.config.sections.engine import EngineFamily


@member("engine", "torch")
class TorchEngineConfig(EngineFamily):
    """``torch``: ``TorchEngine`` in this process, on ``device`` (``auto``: the first CUDA
    device if any, else the CPU); it records routing for ``trainer.routing_replay``.
    ``draft_tokens`` > 0: speculative decoding, that many drafts a round from the MTP head
    saved beside the model (``trainer.mtp``; a Llama-family model): the same distribution,
    the same greedy output (docs/engines.md)."""

    RECORDS_ROUTING: ClassVar[bool] = True
    device: Device = Field(
        "auto",
        description="where the engine runs: auto (a CUDA device if any, else the CPU), cpu, "
                    "cuda[:N]")
    draft_tokens: int = Field(
        0, ge=0, description="speculative decoding: drafts a round from the MTP head (0: off)")

    def check(self, cfg) -> None:
        if self.draft_tokens and cfg.trainer.routing_replay:
            raise ValueError("engine.draft_tokens: speculative decoding does not record "
                             "routing; set trainer.routing_replay=false")
        super().check(cfg)

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False,
              draft_dir: Path | None = None) -> Any:
        import torch

        from posttrain.engines.torch_engine import TorchEngine
        from posttrain.models import load_model
        from posttrain.models.devices import resolve_device
        from posttrain.models.mtp import MTPHead

        draft = MTPHead.load(draft_dir or model_dir) if self.draft_tokens else None
        return TorchEngine(model if model is not None else load_model(model_dir, dtype),
                           pad_token_id, eos_token_id,
                           dtype=getattr(torch, dtype), record_routing=record_routing,
                           device=resolve_device(self.device, "engine.device"), draft=draft,
                           draft_tokens=self.draft_tokens or 1)

    def load(self, model_dir: Path, dtype: str = "float32") -> tuple[Any, Any]:
        """``(engine, tokenizer)``: the model saved in ``model_dir`` in an engine of its own
        (``build``), with the directory's tokenizer (``ModelNotFoundError`` when there is
        none)."""
        from posttrain.models import load_tokenizer

        tokenizer = load_tokenizer(model_dir)
        return self.build(model_dir, dtype, tokenizer.pad_token_id,
                          tokenizer.eos_token_id), tokenizer
