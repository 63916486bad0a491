"""Rollouts shared by the ranks of a trainer process group (``dist.trainer_processes``):
rank 0 generates and the other ranks receive what it made, so each prompt is generated once,
on rank 0's engines (in-process or Ray engine actors).

Every rank runs the same RL loop in lockstep. Rank 0's source (``LeaderEpisodes``) wraps the
real one and broadcasts each result the loop reads (``broadcast_object_list`` on the default
group): a step's episodes with their version and staleness bound, an evaluation's metrics, the
step's statistics; the others' ``FollowerEpisodes`` receive them. A ``call(fn)`` (the weight
sync, sleep) runs ``fn`` on every rank, so the collectives inside it (a sharded trainer's
gathered weights, its forward for the probes) line up: rank 0's ``fn`` gets its engines
wrapped in ``BroadcastingEngine``, which broadcasts each answer, the others' a
``MirrorEngine``, which returns those answers (its ``update_weights`` drains the weights it is
given, so every rank gathers them). An error on rank 0 is raised on every rank.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch.distributed as dist

T = TypeVar("T")


def group_rank() -> int | None:
    """This process's rank in a trainer process group of two or more (None: no such group)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank()
    return None


def _share(value: Any = None, error: BaseException | None = None) -> Any:
    """Rank 0's ``value`` (or ``error``, raised on the other ranks) on every rank."""
    if error is not None:
        try:
            pickle.dumps(error)
        except Exception:
            error = RuntimeError(f"{type(error).__name__} on rank 0: {error}")
    box = [(value, error)]
    dist.broadcast_object_list(box, src=0)
    value, error = box[0]
    if error is not None and dist.get_rank() != 0:
        raise error
    return value


def _lead(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on rank 0, its result (or error) sent to every rank."""
    try:
        value = fn(*args)
    except Exception as exc:
        _share(error=exc)
        raise
    return _share(value)


def _drain(named_tensors: Iterable) -> None:
    for _ in named_tensors:
        pass


class BroadcastingEngine:
    """Rank 0's engine: each answer also goes to the other ranks."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.serves_adapters = getattr(engine, "serves_adapters", False)

    @property
    def version(self) -> int:
        return self.engine.version

    def generate(self, prompts, sampling, seeds=None):
        return _lead(self.engine.generate, prompts, sampling, seeds)

    def score(self, sequences):
        return _lead(self.engine.score, sequences)

    def weights_checksum(self) -> str:
        return _lead(self.engine.weights_checksum)

    def sleep(self) -> None:
        _lead(self.engine.sleep)

    def update_weights(self, named_tensors, version: int) -> None:
        weights = iter(named_tensors)

        def load() -> None:
            try:
                self.engine.update_weights(weights, version)
            finally:
                _drain(weights)  # as the other ranks do: every gather happens on every rank

        _lead(load)

    def update_adapter(self, named_tensors, config: dict, version: int) -> None:
        _lead(self.engine.update_adapter, list(named_tensors), config, version)


class MirrorEngine:
    """Another rank's stand-in for rank 0's engine: the answers rank 0's engine gave
    (``serves_adapters``: as rank 0's engine does)."""

    def __init__(self, serves_adapters: bool = False) -> None:
        self.version, self.serves_adapters = 0, serves_adapters

    def generate(self, prompts, sampling, seeds=None):
        return _share()

    def score(self, sequences):
        return _share()

    def weights_checksum(self) -> str:
        return _share()

    def sleep(self) -> None:
        _share()

    def update_weights(self, named_tensors, version: int) -> None:
        _drain(named_tensors)
        _share()
        self.version = version

    def update_adapter(self, named_tensors, config: dict, version: int) -> None:
        self.update_weights(named_tensors, version)


class LeaderEpisodes:
    """Rank 0's episode source: ``source``, its results broadcast."""

    def __init__(self, source) -> None:
        self.source = source
        self.title, self.on_policy = source.title, source.on_policy
        self.eval_rollout_fn = source.eval_rollout_fn

    @property
    def version(self) -> int:
        return self.source.version

    def __enter__(self) -> LeaderEpisodes:
        self.source.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.source.__exit__(*exc)

    def take(self, step: int):
        return _lead(lambda: (self.source.take(step), self.source.version,
                              self.source.staleness()))[0]

    def staleness(self) -> tuple:
        return self.source.staleness()

    def call(self, fn: Callable[[Any], T], drain: bool = True) -> list[T]:
        return self.source.call(lambda engine: fn(BroadcastingEngine(engine)), drain)

    def first(self, fn: Callable[[Any], T]) -> T:
        return _lead(self.source.first, fn)

    def release(self, groups: int) -> None:
        self.source.release(groups)

    def stats(self) -> dict[str, float]:
        return _lead(self.source.stats)


class FollowerEpisodes:
    """Another rank's episode source: what rank 0's ``LeaderEpisodes`` sends; ``call`` runs
    on ``source``'s engines, one ``MirrorEngine`` for each of rank 0's engines."""

    def __init__(self, source) -> None:
        self.title, self.on_policy = source.title, source.on_policy
        self.eval_rollout_fn = source.eval_rollout_fn
        self.mirrors = list(source.engines)
        self.version, self._staleness = 0, ()

    def __enter__(self) -> FollowerEpisodes:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def take(self, step: int):
        taken, self.version, self._staleness = _share()
        return taken

    def staleness(self) -> tuple:
        return self._staleness

    def call(self, fn: Callable[[Any], T], drain: bool = True) -> list[T]:
        return [fn(mirror) for mirror in self.mirrors]

    def first(self, fn: Callable[[Any], T]) -> T:
        return _share()

    def release(self, groups: int) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return _share()


def shared_source(source):
    """``source`` itself outside a trainer process group; rank 0's or another rank's side of
    it inside one (another rank's ``source`` holds ``MirrorEngine``s)."""
    rank = group_rank()
    if rank is None:
        return source
    return LeaderEpisodes(source) if rank == 0 else FollowerEpisodes(source)


def shared_engine(engine):
    """``engine`` outside a trainer process group; rank 0's engine broadcasting its answers
    inside one (another rank's engine is already a ``MirrorEngine``)."""
    return BroadcastingEngine(engine) if group_rank() == 0 else engine
