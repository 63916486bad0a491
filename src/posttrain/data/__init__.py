"""Layer 4: training data — conversations with exact assistant masks, preference pairs, and
curation by sampling."""

from posttrain.data.conversations import (
    ChatData,
    ConversationSegments,
    generate_arithmetic_sft,
    load_chat_jsonl,
)
from posttrain.data.preference_pairs import PreferencePair, load_preference_jsonl

__all__ = ["ChatData", "ConversationSegments", "PreferencePair", "generate_arithmetic_sft",
           "load_chat_jsonl", "load_preference_jsonl"]
