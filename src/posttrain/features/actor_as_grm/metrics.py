"""What a rollout reports of the policy's gradings."""

from __future__ import annotations

import statistics

from posttrain.hooks import RolloutView
from posttrain.types import Episode


def is_grading(episode: Episode) -> bool:
    return bool(episode.meta.get("grading"))


def grading_metrics(rollout: RolloutView) -> dict[str, float]:
    """``grading/reward`` and ``grading/missing`` (no grade) over the gradings set aside."""
    gradings = [e for e in rollout.aside if is_grading(e)]
    if not gradings:
        return {}
    return {"grading/reward": statistics.fmean(e.reward for e in gradings),
            "grading/missing": statistics.fmean(e.meta["grade"] is None for e in gradings)}
