"""Layer 2: models and tokenizers from local directories, tiny-model factory, log-probs."""

from posttrain.models.chat import ChatTemplateError, encode_chat, encode_prompt
from posttrain.models.frozen import frozen
from posttrain.models.loading import (
    ModelNotFoundError,
    check_same_vocabulary,
    load_model,
    load_tokenizer,
    load_value_model,
    save_model,
)
from posttrain.models.logprobs import (
    naive_sequence_logprobs,
    sequence_logprobs,
    token_distributions,
)
from posttrain.models.shared_prefix import prefix_lengths
from posttrain.models.tiny import PRESETS, build_tiny, build_tokenizer
from posttrain.models.values import sequence_scores, sequence_values

__all__ = [
    "PRESETS",
    "ChatTemplateError",
    "ModelNotFoundError",
    "build_tiny",
    "build_tokenizer",
    "check_same_vocabulary",
    "encode_chat",
    "encode_prompt",
    "frozen",
    "load_model",
    "load_tokenizer",
    "load_value_model",
    "naive_sequence_logprobs",
    "prefix_lengths",
    "save_model",
    "sequence_logprobs",
    "sequence_scores",
    "sequence_values",
    "token_distributions",
]
