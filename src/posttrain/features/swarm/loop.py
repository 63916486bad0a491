"""The swarm in the agent loop."""

from __future__ import annotations

from dataclasses import replace

from posttrain.harness import SwarmSettings


def swarm_options(cfg, tools) -> dict:
    """The agent loop's ``swarm`` (``agent.swarm``: sub-agents on the task's ``tools``, each
    with the loop's limits at ``max_turns``); nothing without it."""
    swarm = cfg.agent.swarm
    if swarm is None:
        return {}
    return {"swarm": SwarmSettings(tools, swarm.max_subagents,
                                   replace(cfg.agent.limits(), max_turns=swarm.max_turns),
                                   swarm.prompt, swarm.target)}
