"""Layer 5: making scored episodes — single-turn, agent and judged rollouts, evaluation,
reward shaping, and the asynchronous machinery (dispatcher, buffer, workers)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
