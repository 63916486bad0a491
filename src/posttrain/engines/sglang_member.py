"""The engine ``sglang``: SGLang in-process, on GPU machines (docs/engines.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from posttrain.config.family import member
from posttrain.config.sections.engine import EngineFamily


@member("engine", "sglang")
class SGLangEngineConfig(EngineFamily):
    """``sglang``: in-process SGLang (GPU machines: ``pip install 'posttrain[gpu]'``)."""

    IN_PROCESS_ONLY: ClassVar[bool] = True

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False) -> Any:
        from posttrain.engines.sglang_engine import SGLangEngine

        return SGLangEngine(model_dir, dtype, sleep=self.sleep)
