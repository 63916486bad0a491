"""The stages and what they share: one file per stage with its loop (``sft``, ``dpo``,
``reward_model``, ``distillation/`` offline and on-policy, ``rl``: one loop for sync and async),
``run_tasks`` (the task, rollout, reward, judges and evaluation a config describes), ``build``
(``RunParts``: those plus the run directory), ``placement`` (where engines, trainers and
teachers run), ``judges/`` (one module a judge kind), ``stages`` (the stages a config lists, in
order) and the outer loops (``outer/``)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
