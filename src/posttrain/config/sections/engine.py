"""The rollout engine a run samples with (``engine.name``): the section every engine extends.
A member builds its engine (docs/extending.md adds one); every command that samples gets its
engine from ``build``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from posttrain.config.family import Member


class EngineFamily(Member):
    """What every rollout engine has: ``sleep`` shares the device with the trainer by time:
    the engine frees its weights (and cache) for each synchronous RL update and gets them back
    with the weight sync that follows. Weight syncs to any engine are verified the same way
    (``rl.sync``). ``RECORDS_ROUTING``: the engine records a mixture-of-experts model's
    routing (``trainer.routing_replay``)."""

    FAMILY: ClassVar[str] = "engine"
    name: str = Field(
        description="the engine: torch, vllm, sglang, or a section class by dotted path")
    RECORDS_ROUTING: ClassVar[bool] = False
    sleep: bool = Field(
        False, description="free the engine's weights and cache during each synchronous RL update")

    def check(self, cfg) -> None:
        if self.sleep and ("rl" not in cfg.stages or cfg.rl.mode != "sync"
                           or cfg.dist.placement != "colocated"):
            raise ValueError("engine.sleep frees the engine's memory during each synchronous "
                             "RL update for the trainer beside it: it needs the rl stage with "
                             "rl.mode=sync and engines in this process or colocated Ray "
                             "actors (dist.placement=colocated)")

    def build(self, model_dir: Path, dtype: str, pad_token_id: int,
              eos_token_id: int | None, model: Any = None, record_routing: bool = False) -> Any:
        """The engine (``engines.Engine``) holding the model saved in ``model_dir`` (or the
        in-memory ``model`` with those weights, for an in-process engine), computing in
        ``dtype`` (``float32``, ``bfloat16``, ``float16``), padding with ``pad_token_id`` and
        stopping at ``eos_token_id``."""
        raise NotImplementedError


class ServingEngineFamily(EngineFamily):
    """An inference server's engine (vLLM, SGLang) that takes a fixed share of a GPU's memory
    for its weights and KV cache: ``gpu_memory_share`` (vLLM's ``gpu_memory_utilization``,
    SGLang's ``mem_fraction_static``; null: the engine's default). Ray engines that share a GPU
    (``0 < dist.gpus_per_engine < 1``, colocated with the trainer or not) must set it, at most
    their share of the GPU, or the first engine to start would claim the memory the others
    (and a colocated trainer) need."""

    gpu_memory_share: float | None = Field(
        None, gt=0, le=1,
        description="share of a GPU's memory the server takes, in (0, 1] (null: its default)")

    def check(self, cfg) -> None:
        share = cfg.dist.gpus_per_engine
        if (cfg.dist.backend == "ray" and 0 < share < 1
                and (self.gpu_memory_share is None or self.gpu_memory_share > share)):
            beside = "the other engines and the trainer" \
                if cfg.dist.placement == "colocated" else "the other engines"
            raise ValueError(f"engine.gpu_memory_share: engines share a GPU (dist."
                             f"gpus_per_engine={share:g}); set engine.gpu_memory_share <= "
                             f"{share:g}, leaving {beside} the rest")
        super().check(cfg)
