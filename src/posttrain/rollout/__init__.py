"""Making scored episodes: single-turn, agent and judged rollouts, external agents, evaluation,
reward shaping and dynamic-sampling filters, the asynchronous machinery (dispatcher, buffer,
workers) and where an RL step's episodes come from (``SyncEpisodes``, ``AsyncEpisodes``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
