# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .chat import ChatTemplateError, encode_chat, encode_prompt, render_prompt, stop_tokens
from .frozen import frozen
from .loading import (
    ModelNotFoundError,
    check_same_vocabulary,
    load_model,
    load_tokenizer,
    load_value_model,
    save_model,
)
from .logprobs import (
    naive_sequence_logprobs,
    sequence_logprobs,
    sequence_scores,
    sequence_values,
    token_distributions,
)
from .presets import PRESETS
from .shared_prefix import prefix_lengths
from .text_embeddings import pooled_states
from .tiny import build_tiny, build_tokenizer

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
    "pooled_states",
    "prefix_lengths",
    "render_prompt",
    "save_model",
    "sequence_logprobs",
    "sequence_scores",
    "sequence_values",
    "stop_tokens",
    "token_distributions",
]
