"""``algo.taco`` (docs/algorithms.md): the positive advantages of tail tokens shrink; it needs
the rollout policy's token entropy (a no-gradient pass)."""

from posttrain.hooks import Feature

FEATURE = Feature("taco", order=10, package=__name__, advantages=".modifier:tail_advantages",
                  needs_old_entropy=".modifier:enabled")
