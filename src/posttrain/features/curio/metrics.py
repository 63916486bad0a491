"""What a rollout reports of CURIO's episodes."""

from __future__ import annotations

import math
import statistics

from posttrain.harness.curio import final_log_belief
from posttrain.hooks import RolloutView


def curio_metrics(rollout: RolloutView) -> dict[str, float]:
    """``curio/log_belief``, the mean over episodes of the final belief's log-probability of
    the true user type, with its standard error (``_se``); nothing for other episodes."""
    finals = [final_log_belief(e.meta["env"]["curio"]) for e in rollout.episodes
              if "curio" in e.meta.get("env", {})]
    if not finals:
        return {}
    se = statistics.stdev(finals) / math.sqrt(len(finals)) if len(finals) > 1 else 0.0
    return {"curio/log_belief": statistics.fmean(finals), "curio/log_belief_se": se}
