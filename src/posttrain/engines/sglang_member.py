"""The engine ``sglang``: SGLang, in-process or as Ray engine actors, on GPU machines
(docs/engines.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain.config.family import member
from posttrain.config.sections.engine import ServingEngineFamily


@member("engine", "sglang")
class SGLangEngineConfig(ServingEngineFamily):
    """``sglang``: SGLang in this process or in a Ray engine actor (GPU machines: ``pip
    install 'posttrain[gpu]'``)."""

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False) -> Any:
        from posttrain.engines.sglang_engine import SGLangEngine

        return SGLangEngine(model_dir, dtype, sleep=self.sleep,
                            mem_fraction_static=self.gpu_memory_share or 0.5)
