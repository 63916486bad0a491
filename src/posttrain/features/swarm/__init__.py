"""Agent swarms (``agent.swarm``; PARL): what a rollout reports of the subagents spawned."""

from posttrain.hooks import Feature

FEATURE = Feature("swarm", order=60, package=__name__, rollout_metrics=".metrics:swarm_metrics")
