"""The judges of reward parts (``reward.judges``), one module a kind (a feature's own kinds
live in its folder: P-GenRM's in ``features/pgenrm``), and the chat models a config names
(``chats``)."""
