"""Layer 1: the config sections (pydantic), validated where they are declared; no behaviour."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
