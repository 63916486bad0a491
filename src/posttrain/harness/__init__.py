"""The agent harness: the multi-turn loop with exact token bookkeeping (stop reasons,
lockstep batches, ``EpisodeState``), compaction into segments, tree rollouts and swarms,
per-episode environments, tools and tool-call parsing, the sandbox, the anti-hack guard and
replay checks."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
