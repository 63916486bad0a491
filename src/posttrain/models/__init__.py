"""Layer 2: models and tokenizers from local directories, tiny-model factory, log-probs."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
