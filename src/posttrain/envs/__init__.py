"""Task families and environments (each built-in family a member of ``task.name``): the
``Task``/``Environment`` protocols, procedural arithmetic, calculator,
search, code, lookup, reasoning-gym and tau-bench."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
