"""Agent swarms (``agent.swarm``; PARL): the agent loop's sub-agents, the parts a swarm
scores itself, what it offers reward shaping (``parl``'s ``parallel`` and ``finish``) and what
a rollout reports of the subagents spawned."""

from posttrain.hooks import Feature

FEATURE = Feature("swarm", order=60, package=__name__, rollout_metrics=".metrics:swarm_metrics",
                  scored_parts=".rules:swarm_parts", shaping_inputs=".shaping:parl_parts",
                  agent_options=".loop:swarm_options")
