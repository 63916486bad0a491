"""Reward parts left missing (a judge without a parsable verdict, a reward function that
failed, a reference ``math`` cannot parse) are never scored 0 silently: ``meta["missing_parts"]``
names the part, the part takes the mean of its group's scored samples (so a failure gives no
advantage either way; 0 when none in the group was scored), and the metrics count the misses
(``reward/<part>/missing``) for every part that can be missing (``meta["fallible_parts"]``).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from posttrain.rewards import RewardFunction
from posttrain.types import Episode


def groups(episodes: Sequence[Episode]) -> dict[str, list[int]]:
    """Row indices of each group, in order."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, ep in enumerate(episodes):
        out[ep.group_id].append(i)
    return dict(out)


def fill_missing(episodes: Sequence[Episode], reward_fn: RewardFunction) -> None:
    """Every missing part takes its group's mean over the episodes that have it; each
    total is recomputed with ``reward_fn``'s weights."""
    for rows in groups(episodes).values():
        missing = {p for r in rows for p in episodes[r].meta.get("missing_parts", ())}
        for part in missing:
            known = [episodes[r].rewards[part] for r in rows
                     if part not in episodes[r].meta.get("missing_parts", ())]
            fill = statistics.fmean(known) if known else 0.0
            for r in rows:
                if part in episodes[r].meta.get("missing_parts", ()):
                    episodes[r].rewards[part] = fill
        if missing:
            for r in rows:
                episodes[r].reward = reward_fn.total(episodes[r].rewards)


def missing_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """``reward/<part>/missing``: the share of episodes that left ``part`` unscored, for
    every part that can be missing."""
    parts = episodes[0].meta.get("fallible_parts", ()) if episodes else ()
    return {f"reward/{part}/missing": sum(part in e.meta.get("missing_parts", ())
                                          for e in episodes) / len(episodes)
            for part in parts}
