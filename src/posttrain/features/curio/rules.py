"""CURIO's config rules (no torch: they run when a config is validated)."""

from __future__ import annotations

from posttrain.config.combinations import env_scored
from posttrain.config.sections.features.curio import CURIO_PART


def curio_part(cfg) -> list[str]:
    """The part CURIO scores, when ``reward.curio`` is set."""
    return [CURIO_PART] if cfg.reward.curio is not None else []


def check(cfg) -> None:
    """The reward part ``curio`` with verifier ``env`` is CURIO's, unless the task's
    environment (or ``task.env``) scores a part of that name."""
    if cfg.reward.curio is None and cfg.task.env is None \
            and CURIO_PART in env_scored(cfg) - set(cfg.task.SCORED_PARTS):
        raise ValueError(f"the reward part {CURIO_PART!r} (verifier env) is CURIO's intrinsic "
                         "reward: set reward.curio")
