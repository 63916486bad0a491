"""Layer 3: rollout engines behind the ``Engine`` protocol."""

from posttrain.engines.base import Engine, FinishReason, GenerationOutput
from posttrain.engines.sampling import processed_logprobs, sample_tokens
from posttrain.engines.torch_engine import TorchEngine

__all__ = [
    "Engine",
    "FinishReason",
    "GenerationOutput",
    "TorchEngine",
    "processed_logprobs",
    "sample_tokens",
]
