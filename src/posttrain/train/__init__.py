"""The whole update: episodes to batch, old and reference log-probs, advantages, optimiser
steps, KL and entropy control (``PolicyUpdate``), and the ``Trainer`` (policy or critic; data
parallel inside a torch.distributed group), its losses, schedule and atomic checkpoints."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
