"""The token-exact data model shared by every other package: ``Segment``, ``Episode``,
``Batch``, ``SamplingParams``, the errors several packages raise, JSONL I/O, and loading an
object a config names by dotted path (``dotted``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
