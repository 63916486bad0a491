"""``model``: the model a run trains, a local directory or a tiny preset built locally."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.section import Section
from posttrain.models import PRESETS
from posttrain.models.presets import ARCHITECTURES, MOE_ARCHITECTURES
from posttrain.models.quick_tokens import NAME as QUICK_NAME
from posttrain.models.quick_tokens import QUICK_TOKENS


class ModelConfig(Section):
    """Exactly one of ``path`` (a local HF model directory) or ``preset`` (a tiny model built
    locally into ``<out_dir>/base_model``, in ``architecture``: a real Hugging Face one at tiny
    sizes); a ``path`` alone selects its model, and an override of one replaces the other
    (``config.loading.replace_model_source``). Trained models are held in fp32 (master
    weights); ``trainer.precision`` sets the compute dtype. ``attn_res`` (a llama preset):
    Attention Residuals, ``full`` or ``block`` (``attn_res_block`` layers a block), instead of
    the residual sum (docs/models.md).
    ``quick_tokens``: quick-instruction tokens (``<action>``, ...) the run's model must have;
    those its tokenizer lacks are added, a ``path`` model then copied with them into
    ``<out_dir>/base_model`` (docs/quick_instructions.md)."""

    path: str | None = Field(
        None,
        description="a local Hugging Face model directory (given alone, it replaces the preset)")
    preset: str | None = Field(
        "micro",
        description="a tiny model built into <out_dir>/base_model: nano, micro, small (or set "
                    "path)")
    architecture: Literal[ARCHITECTURES] = Field(
        "llama",
        description="the preset's Hugging Face architecture, randomly initialised at its sizes")
    attn_res: Literal["full", "block"] | None = Field(
        None,
        description="Attention Residuals on a llama preset: full or block (null: the residual sum)")
    attn_res_block: int = Field(2, ge=1, description="layers a block with attn_res=block (>= 1)")
    quick_tokens: list[str] = Field(
        default_factory=list,
        description="quick-instruction tokens (<action>, ...) the model must have; missing ones "
                    "are added")

    @field_validator("quick_tokens")
    @classmethod
    def _quick_tokens(cls, v: list[str]) -> list[str]:
        bad = [n for n in v if not QUICK_NAME.fullmatch(n)]
        if bad or len(set(v)) < len(v):
            raise ValueError(f"distinct names of the form <word>, such as {', '.join(QUICK_TOKENS)}"
                             + (f"; not {', '.join(map(repr, bad))}" if bad else ""))
        return v

    @model_validator(mode="before")
    @classmethod
    def _path_alone(cls, data: Any) -> Any:
        """A ``path`` given without a ``preset`` selects the model there (the preset's
        default, ``micro``, is for a config that names no model)."""
        if isinstance(data, dict) and data.get("path") is not None and "preset" not in data:
            return {**data, "preset": None}
        return data

    @model_validator(mode="before")
    @classmethod
    def _dtype_moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "dtype" in data:
            raise ValueError("model.dtype is replaced by trainer.precision (fp32, bf16, fp16): "
                             "bf16 computes in bfloat16 over fp32 master weights")
        return data

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is not None and v not in PRESETS:
            raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.path is None) == (self.preset is None):
            raise ValueError("set exactly one of model.path and model.preset (the other to null)")
        if self.path is not None and self.architecture != "llama":
            raise ValueError("model.architecture shapes a tiny preset; model.path loads its "
                             "own architecture")
        if self.attn_res is not None and (self.path is not None or self.architecture != "llama"):
            raise ValueError("model.attn_res shapes a tiny llama preset: set model.preset and "
                             "model.architecture=llama (model.path loads its own)")
        if self.attn_res != "block" and self.attn_res_block != 2:
            raise ValueError("model.attn_res_block is set but cannot take effect: it sizes "
                             "model.attn_res=block's blocks")
        return self

    def check(self, cfg) -> None:
        """Router options need a mixture-of-experts model (known here for a preset);
        ``trainer.routing_replay`` needs the routing recorded: by an engine that records it,
        in this process, on synchronous single-turn samples (the only ones that carry it)."""
        if self.attn_res is not None:
            for key, on in (("critic.enabled", "rl" in cfg.stages and cfg.critic.enabled),
                            (f"engine.name={cfg.engine.name}", cfg.engine.name != "torch")):
                if on:
                    raise ValueError(f"model.attn_res is an architecture of posttrain's own: "
                                     f"{key} cannot load it (a value head, another engine)")
            for key, on, why in (
                    ("trainer.shard", cfg.trainer.shard, "FSDP2 wraps each decoder layer"),
                    ("engine.draft_tokens", getattr(cfg.engine, "draft_tokens", 0),
                     "speculative decoding runs the fast decoder, which has plain layers")):
                if on:
                    raise ValueError(f"model.attn_res replaces each layer's input, so {key} "
                                     f"cannot work with it: {why}")
        dense = self.path is None and self.architecture not in MOE_ARCHITECTURES
        for key, on in (("trainer.routing_replay", cfg.trainer.routing_replay),
                        ("actor.router_aux_coef", cfg.actor.router_aux_coef > 0)):
            if on and dense:
                raise ValueError(f"{key} is set but cannot take effect: model.architecture="
                                 f"{self.architecture} has no experts")
        if not cfg.trainer.routing_replay:
            return
        why = [reason for reason, broken in (
            (f"engine.name is {cfg.engine.name} (it does not record routing)",
             not cfg.engine.RECORDS_ROUTING),
            ("dist.backend is ray (engine actors do not record it)", cfg.dist.backend == "ray"),
            ("rl.mode is async", cfg.rl.mode == "async"),
            (f"task.name={cfg.task.name} is an agent task", not cfg.single_turn)) if broken]
        if why:
            raise ValueError(f"trainer.routing_replay is set but cannot take effect: {why[0]}")
