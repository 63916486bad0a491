"""The swarm's config rules (no torch: they run when a config is validated)."""

from __future__ import annotations

from posttrain.config.sections.agent import SWARM_PARTS


def swarm_parts(cfg) -> tuple[str, ...]:
    """PARL's parts, which a swarm scores (``agent.swarm``)."""
    return SWARM_PARTS if cfg.agent.swarm is not None else ()
