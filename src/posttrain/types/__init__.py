"""Layer 0: the token-exact data model shared by every other layer."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
