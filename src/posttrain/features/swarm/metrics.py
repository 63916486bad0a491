"""What a rollout reports of swarm episodes."""

from __future__ import annotations

from posttrain.hooks import RolloutView


def swarm_metrics(rollout: RolloutView) -> dict[str, float]:
    """Swarm episodes' means: ``swarm/subagents`` spawned, ``swarm/critical_steps`` (the
    cost: the longest chain) and ``swarm/total_steps``, and ``swarm/spawning``, the share of
    episodes that spawned at all; nothing for other episodes."""
    episodes = rollout.episodes
    if not episodes or "subagents" not in episodes[0].meta:
        return {}
    n = len(episodes)
    out = {f"swarm/{k}": sum(e.meta[k] for e in episodes) / n
           for k in ("subagents", "critical_steps", "total_steps")}
    return out | {"swarm/spawning": sum(e.meta["subagents"] > 0 for e in episodes) / n}
