"""Layer 6: where the run's pieces execute. ``backend: ray`` puts rollout engines in Ray actors
behind the same ``Engine`` protocol the local run uses; Ray is imported only when asked for
(``pip install 'posttrain[ray]'``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
