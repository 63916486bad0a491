"""Sample-level dispatch with staleness pacing (``staleness_mask``; DeepSeek-V4.1).

Groups are numbered in the order they start; a group's ``G`` samples are dispatched one by one
as ``SampleRequest``s. Pacing: a new group starts only while the groups started and not yet
released (trained on and synced) or discarded number fewer than ``(max_staleness + 1) *
groups_per_step``, so rollout waits for the trainer instead of producing data the bound would
throw away. ``max_inflight_per_group`` caps how many samples of one group run at once. A
request whose worker was lost is ``requeue``d and handed out again before anything new.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from posttrain.engines import row_seeds
from posttrain.engines.sampling import mix64
from posttrain.envs import Task


@dataclass(frozen=True)
class SampleRequest:
    """One sample to generate: sample ``index`` of group ``group``, sampled with ``seed``."""

    group: int
    index: int
    task: Task
    seed: int

    @property
    def sample_id(self) -> str:
        return f"{self.group}:{self.index}"


GroupSource = Callable[[int], tuple[Task, Sequence[int]]]
"""Group number -> its task and the seeds of its ``G`` samples."""


class Dispatcher:
    """Hands out samples under the pacing bound; not thread-safe (callers hold one lock)."""

    def __init__(self, source: GroupSource, group_size: int, groups_per_step: int,
                 max_staleness: int, max_inflight_per_group: int | None = None,
                 start_group: int = 0) -> None:
        self.source, self.group_size = source, group_size
        self.limit = (max_staleness + 1) * groups_per_step
        self.cap = max_inflight_per_group or group_size
        self.next_group = start_group
        self.outstanding = 0  # groups started, not released or discarded
        self._open: dict[int, tuple[Task, Sequence[int], int]] = {}  # group -> task, seeds, next
        self._inflight: dict[int, int] = {}
        self._retry: list[SampleRequest] = []

    def next(self) -> SampleRequest | None:
        """The next sample to generate, or None while pacing or the per-group cap holds."""
        if self._retry:
            return self._hand_out(self._retry.pop(0))
        for group, (task, seeds, nxt) in self._open.items():
            if nxt < self.group_size and self._inflight[group] < self.cap:
                self._open[group] = (task, seeds, nxt + 1)
                return self._hand_out(SampleRequest(group, nxt, task, int(seeds[nxt])))
        if self.outstanding >= self.limit:
            return None
        group = self.next_group
        task, seeds = self.source(group)
        if len(seeds) != self.group_size:
            raise ValueError(f"group {group} has {len(seeds)} seeds for {self.group_size} samples")
        self.next_group += 1
        self.outstanding += 1
        self._open[group], self._inflight[group] = (task, seeds, 0), 0
        return self.next()

    def _hand_out(self, request: SampleRequest) -> SampleRequest:
        self._inflight[request.group] += 1
        return request

    def returned(self, request: SampleRequest) -> None:
        """``request`` came back; when its group has all its samples back it is closed here."""
        group = request.group
        self._inflight[group] -= 1
        handed_out = self._open[group][2]
        if handed_out == self.group_size and self._inflight[group] == 0 and not any(
                r.group == group for r in self._retry):
            del self._open[group], self._inflight[group]

    def requeue(self, request: SampleRequest) -> None:
        """``request`` was lost with its worker: hand it out again, first."""
        self._inflight[request.group] -= 1
        self._retry.append(request)

    def release(self, groups: int) -> None:
        """``groups`` finished groups were trained on (or discarded): room for as many new."""
        if groups > self.outstanding:
            raise ValueError(f"release of {groups} groups, only {self.outstanding} outstanding")
        self.outstanding -= groups


class TaskFamily(Protocol):
    def sample(self, n: int, rng: random.Random) -> list[Task]: ...


class TaskMixer:
    """Multi-task sampling by ratio: group ``n``'s task comes from family ``k`` with probability
    ``ratio_k / sum ratio``, drawn from ``(seed, n)`` alone (reproducible, order-free)."""

    def __init__(self, families: Mapping[str, TaskFamily], ratios: Mapping[str, float],
                 seed: int = 0) -> None:
        if set(families) != set(ratios):
            raise ValueError(f"mixer families {sorted(families)} and ratios {sorted(ratios)} "
                             "differ")
        if any(r < 0 for r in ratios.values()) or sum(ratios.values()) <= 0:
            raise ValueError(f"mixer ratios must be >= 0 with a positive sum, got {dict(ratios)}")
        self.names, self.families, self.seed = sorted(families), families, seed
        self.weights = [ratios[n] for n in self.names]

    def __call__(self, group: int) -> tuple[str, Task]:
        """The family name and task of group ``group``."""
        rng = random.Random(f"{self.seed}:mix:{group}")
        name = rng.choices(self.names, weights=self.weights)[0]
        return name, self.families[name].sample(1, rng)[0]

    def groups(self, group_size: int) -> GroupSource:
        """A dispatcher source: each group's mixed task, its samples seeded from
        ``(seed, group)``."""
        def source(group: int) -> tuple[Task, list[int]]:
            return self(group)[1], row_seeds(mix64(self.seed) ^ group, group_size)

        return source
