"""Layer 3: verifiers and reward composition (reward = dict of named parts)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
