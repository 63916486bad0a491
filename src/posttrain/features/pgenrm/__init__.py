"""P-GenRM (arXiv 2602.12116; docs/reward_models.md): personalised generative reward models.
Two judge kinds (members of the ``judge`` family): ``pgenrm``, a chat model's evaluation
chains for a task's user and its similar users, and ``prototypes``, a trained model's user
prototypes scoring each answer, trained by ``posttrain reward-model`` with ``rm.loss:
pgenrm_pair`` (``training``). The prototypes' model code is ``models.preference_prototypes``."""

from posttrain.hooks import Feature

FEATURE = Feature("pgenrm", order=80, package=__name__, reward_model=".training:prototypes_trainer")
