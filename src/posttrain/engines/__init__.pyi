# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .base import (
    Engine,
    EngineRestarted,
    EngineUnavailableError,
    FinishReason,
    GenerationOutput,
    Sleeper,
)
from .sampling import counter_uniforms, processed_logprobs, row_seeds, sample_tokens
from .sleep import EngineAsleepError
from .torch_engine import TorchEngine
from .weights import WeightsDigest, send_verified, weights_checksum

__all__ = [
    "Engine",
    "EngineAsleepError",
    "EngineRestarted",
    "EngineUnavailableError",
    "FinishReason",
    "GenerationOutput",
    "Sleeper",
    "TorchEngine",
    "WeightsDigest",
    "counter_uniforms",
    "processed_logprobs",
    "row_seeds",
    "sample_tokens",
    "send_verified",
    "weights_checksum",
]
