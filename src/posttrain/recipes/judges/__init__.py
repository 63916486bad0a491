"""The judges of reward parts (``reward.judges``), one module a kind, and the chat models a
config names (``chats``)."""
