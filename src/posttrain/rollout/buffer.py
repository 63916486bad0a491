"""``RolloutBuffer``: returned samples gather into groups; the trainer takes complete groups.

A group closes when its ``G`` samples are in. The ledger records every sample id once: a sample
that comes back twice (a restarted worker finishing work that was already re-dispatched) is
ignored and counted, never trained on twice.

Length-bias control: short samples return first, so taking groups in completion order favours
prompts with short answers. With ``max_overtake = k`` a complete group is held back while more
than ``k`` older groups are still open (``0``: strict dispatch order; None: completion order).
"""

from __future__ import annotations

from posttrain.rollout.dispatch import SampleRequest
from posttrain.types import Episode


class RolloutBuffer:
    """Not thread-safe: callers hold one lock around it and the ``Dispatcher``."""

    def __init__(self, group_size: int, max_overtake: int | None = None) -> None:
        self.group_size = group_size
        self.max_overtake = max_overtake
        self.ledger: set[str] = set()
        self.duplicates = 0
        self._open: dict[int, dict[int, Episode]] = {}
        self._complete: dict[int, list[Episode]] = {}

    def opened(self, group: int) -> None:
        """The dispatcher started ``group`` (so it counts as open before any sample returns)."""
        self._open.setdefault(group, {})

    def add(self, request: SampleRequest, episode: Episode) -> str:
        """File one returned sample; returns ``"duplicate"``, ``"open"`` (its group still waits)
        or ``"complete"``."""
        if request.sample_id in self.ledger:
            self.duplicates += 1
            return "duplicate"
        self.ledger.add(request.sample_id)
        samples = self._open.setdefault(request.group, {})
        samples[request.index] = episode
        if len(samples) < self.group_size:
            return "open"
        del self._open[request.group]
        self._complete[request.group] = [samples[i] for i in range(self.group_size)]
        return "complete"

    def _takeable(self) -> list[int]:
        ready = sorted(self._complete)
        if self.max_overtake is None:
            return ready
        return [g for g in ready if sum(o < g for o in self._open) <= self.max_overtake]

    def ready(self) -> int:
        """Complete groups the trainer may take now."""
        return len(self._takeable())

    def take(self, n: int) -> list[list[Episode]]:
        """Up to ``n`` takeable groups, oldest dispatched first."""
        return [self._complete.pop(g) for g in self._takeable()[:n]]
