"""CURIO (``reward.curio``; docs/curio.md): what a rollout reports of the belief over the
user's type."""

from posttrain.hooks import Feature

FEATURE = Feature("curio", order=70, package=__name__, rollout_metrics=".metrics:curio_metrics")
