# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .conversations import ChatData, ConversationSegments, generate_arithmetic_sft, load_chat_data
from .preference_pairs import PreferencePair, load_preference_data

__all__ = ["ChatData", "ConversationSegments", "PreferencePair", "generate_arithmetic_sft",
           "load_chat_data", "load_preference_data"]
