"""Where a run's pieces execute on Ray: rollout engines as actors behind the same ``Engine``
protocol the local run uses, the trainer as an actor, and data-parallel trainer processes
(docs/scaling.md); Ray is imported only when asked for (``pip install 'posttrain[ray]'``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
