"""CURIO (``reward.curio``; docs/curio.md): a belief over the user's type around every agent
environment, its intrinsic reward (the reward part ``curio``), and what a rollout reports of
the belief."""

from posttrain.hooks import Feature

FEATURE = Feature("curio", order=70, package=__name__, rollout_metrics=".metrics:curio_metrics",
                  wrap_environment=".environment:with_curio", check=".rules:check",
                  scored_parts=".rules:curio_part")
