"""Effort control's config rules (no torch: they run when a config is validated)."""

from __future__ import annotations


def check(cfg) -> None:
    """The effort length penalty reads the levels of ``task.efforts``."""
    if "rl" in cfg.stages and not cfg.task.efforts and any(
            r.name == "effort_length_penalty" for r in cfg.reward.shaping):
        raise ValueError("reward.shaping effort_length_penalty needs task.efforts")


def active(cfg) -> bool:
    """Effort control is on with ``task.efforts``."""
    return bool(cfg.task.efforts)
