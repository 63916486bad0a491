"""Config sections (pydantic) validated where they are declared, no behaviour: the
sections of RL, the algorithm, the actor, the fixed-data stages, distillation, the cluster and
data; the families' base sections and their index (``family``); the helpers of rules across
sections."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
