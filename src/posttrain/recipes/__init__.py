"""Layer 6: one file per stage wiring rollout and training (``sft``, ``dpo``, ``reward_model``,
``distillation``, ``rl``), ``build`` (config -> engine, tasks, reward, judges, teachers) and
``stages`` (the run a config describes)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
