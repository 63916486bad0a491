"""Layer 4: training data — conversations with exact assistant masks, preference pairs, and
curation by sampling."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
