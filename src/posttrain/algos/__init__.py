"""Layer 1: the algorithm catalogue — pure tensor functions under their ALGORITHMS.md names.

``get(kind, name)`` returns a function (aliases and ``-``/``_`` spellings accepted),
``names(kind)`` lists a kind; arguments are keyword tensors named as in the spec.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
