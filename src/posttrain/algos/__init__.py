"""The algorithm catalogue: pure tensor functions under their canonical names
(docs/algorithms.md), looked up with ``get(kind, name)`` (advantage, policy_loss, aggregation,
kl, offpolicy, shaping, divergence, preference, reward_model, metric).

``get(kind, name)`` returns a function (aliases and ``-``/``_`` spellings accepted),
``names(kind)`` lists a kind; arguments are keyword tensors named as in the spec.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
