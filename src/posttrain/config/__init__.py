"""Config: pydantic sections validated where they are declared, with no behaviour
(``sections``); the families' registry and index (``family``); the ``RunConfig`` tree that
assembles them (the members chosen by name), the rules across sections, YAML loading with
overrides, and ``config explain``."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
