"""Layer 4: the agent harness — the multi-turn loop with exact token bookkeeping, tools and
their calls (sandbox, context managers and guards build on these)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
