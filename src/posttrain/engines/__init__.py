"""Layer 3: rollout engines behind the ``Engine`` protocol."""

from posttrain.engines.base import (
    Engine,
    EngineRestarted,
    EngineUnavailableError,
    FinishReason,
    GenerationOutput,
)
from posttrain.engines.sampling import (
    counter_uniforms,
    processed_logprobs,
    row_seeds,
    sample_tokens,
)
from posttrain.engines.torch_engine import TorchEngine
from posttrain.engines.weights import weights_checksum

__all__ = [
    "Engine",
    "EngineRestarted",
    "EngineUnavailableError",
    "FinishReason",
    "GenerationOutput",
    "TorchEngine",
    "counter_uniforms",
    "processed_logprobs",
    "row_seeds",
    "sample_tokens",
    "weights_checksum",
]
