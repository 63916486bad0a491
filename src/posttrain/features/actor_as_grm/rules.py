"""When the actor grades (no torch: it runs when a config is validated)."""

from __future__ import annotations


def active(cfg) -> bool:
    """The actor grades with ``rl.actor_as_grm`` set."""
    return cfg.rl.actor_as_grm is not None
