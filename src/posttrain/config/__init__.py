"""Layer 7: the pydantic config tree and its YAML loader."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
