"""Layer 5: the whole update — episodes to batch, old and reference log-probs, advantages,
optimiser steps, KL and entropy control — and the trainer, its losses, schedule and
checkpoints."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
