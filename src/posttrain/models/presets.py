"""The sizes of the tiny models ``build_tiny`` makes (config validation reads them without
torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TinyPreset:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int


PRESETS: dict[str, TinyPreset] = {
    "nano": TinyPreset(64, 2, 4, 256, 512),
    "micro": TinyPreset(128, 3, 4, 512, 512),
    "small": TinyPreset(256, 4, 8, 1024, 1024),
}


# architectures a tiny preset can be built in: the real Hugging Face config classes at tiny sizes
ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3_moe", "gemma3")
MOE_ARCHITECTURES = ("qwen3_moe",)  # those with routed experts
