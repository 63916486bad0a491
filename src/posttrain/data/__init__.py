"""Training data: conversations with exact assistant masks and the SFT batch cursor,
preference pairs, prompts from a user's dataset (the task family ``dataset``), and curation by
sampling (``filter``, ``rejection-sample``, ``pair-sample``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
