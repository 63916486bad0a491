"""``AsyncRollout``: one rollout thread per ``Worker`` keeps its engine busy while the trainer
trains, all feeding one ``RolloutBuffer`` under one ``Dispatcher``'s pacing.

An engine is used by its own worker only. The trainer asks for work on the engines (a weight
sync, an evaluation) with ``call``; each thread runs it, through its worker's ``exclusive``, at
its next step boundary — with ``drain=True`` only once its samples in flight have finished (no
partial rollout). A call that does not start within its timeout raises ``WeightSyncError``: a
hang is an error, never a silent stall. An engine that was restarted (``EngineRestarted``)
loses its samples in flight; they go back to the dispatcher and are generated again, and the
buffer's ledger keeps any sample from counting twice. Any other exception on a rollout thread
is re-raised in the trainer's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from posttrain.engines import Engine, EngineRestarted
from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher, SampleRequest
from posttrain.types import Episode
from posttrain.types.errors import WeightSyncError

T = TypeVar("T")
Job = tuple[Callable[[Engine], Any], bool, Future]


class Worker(Protocol):
    """What a rollout thread drives: ``RolloutWorker`` (single-turn samples, a chunk at a time)
    or ``ExternalAgentWorker`` (sessions of an external agent). ``step`` advances the samples
    in flight and returns those that finished; ``exclusive`` runs ``fn`` on the engine with
    nothing generating. A worker whose ``step`` may raise ``EngineRestarted`` also has
    ``abandon``, which drops its samples in flight and returns their requests."""

    engine: Engine
    inflight: list
    tokens_generated: int

    def admit(self, request: SampleRequest) -> None: ...

    def step(self) -> list[tuple[SampleRequest, Episode]]: ...

    def exclusive(self, fn: Callable[[Engine], T]) -> T: ...

    def close(self) -> None: ...


class AsyncRollout:
    def __init__(self, workers: Sequence[Worker], dispatcher: Dispatcher,
                 buffer: RolloutBuffer, capacity: int) -> None:
        self.workers, self.dispatcher, self.buffer = list(workers), dispatcher, buffer
        self.capacity = capacity  # samples in flight per worker
        self.cond = threading.Condition()
        self.rollout_idle_s = 0.0  # summed over the workers
        self.trainer_wait_s = 0.0
        self.restarts = self.requeued = 0
        self._jobs: dict[int, Job] = {}
        self._stop = False
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                          name=f"posttrain-rollout-{i}")
                         for i in range(len(self.workers))]

    # -- trainer side ------------------------------------------------------------------------
    def __enter__(self) -> AsyncRollout:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        for thread in self._threads:
            thread.join()

    def wait_groups(self, n: int) -> list[list[Episode]]:
        """Block until ``n`` groups can be taken; take them (oldest dispatched first)."""
        start = time.perf_counter()
        with self.cond:
            self.cond.wait_for(lambda: self._error is not None or self.buffer.ready() >= n)
            self._raise()
            groups = self.buffer.take(n)
        self.trainer_wait_s += time.perf_counter() - start
        return groups

    def release(self, groups: int) -> None:
        """``groups`` taken groups are done with (trained on and synced, or discarded)."""
        with self.cond:
            self.dispatcher.release(groups)
            self.cond.notify_all()

    def call(self, fn: Callable[[Engine], Any], drain: bool, timeout: float | None = None,
             workers: Sequence[int] | None = None) -> list[Any]:
        """Run ``fn(engine)`` on each of ``workers``' threads (default: all, one after the
        other) at its next chunk boundary, after its samples in flight finish if ``drain``;
        returns the results or raises the first exception."""
        return [self._call_one(i, fn, drain, timeout)
                for i in (range(len(self.workers)) if workers is None else workers)]

    def _call_one(self, i: int, fn: Callable[[Engine], Any], drain: bool,
                  timeout: float | None) -> Any:
        future: Future = Future()
        start = time.perf_counter()
        with self.cond:
            self._raise()
            self._jobs[i] = (fn, drain, future)
            self.cond.notify_all()
            started = self.cond.wait_for(
                lambda: i not in self._jobs or self._error is not None, timeout=timeout)
            if not started:
                del self._jobs[i]
                raise WeightSyncError(
                    f"rollout worker {i} did not reach a sync point within {timeout:g} s "
                    f"({len(self.workers[i].inflight)} samples in flight)")
            self._raise()
        result = future.result()
        self.trainer_wait_s += time.perf_counter() - start
        return result

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError("a rollout thread failed") from self._error

    # -- rollout threads ---------------------------------------------------------------------
    def _run(self, i: int) -> None:
        try:
            while self._loop_once(i):
                pass
        except BaseException as exc:  # handed to the trainer thread
            with self.cond:
                self._error = exc
                self.cond.notify_all()

    def _loop_once(self, i: int) -> bool:
        worker = self.workers[i]
        with self.cond:
            if self._stop:
                return False
            job = self._jobs.get(i)
            if job is not None and (not job[1] or not worker.inflight):
                del self._jobs[i]
            else:
                job = None
                if i not in self._jobs:  # a pending drain admits nothing new
                    self._admit(worker)
                if not worker.inflight:
                    start = time.perf_counter()
                    self.cond.wait()
                    self.rollout_idle_s += time.perf_counter() - start
                    return True
        if job is not None:
            fn, _, future = job
            try:
                future.set_result(worker.exclusive(fn))
            except BaseException as exc:  # the trainer re-raises it
                future.set_exception(exc)
            with self.cond:
                self.cond.notify_all()
            return True
        try:
            finished = worker.step()
        except EngineRestarted:
            with self.cond:
                lost = worker.abandon()
                for request in lost:
                    self.dispatcher.requeue(request)
                self.restarts += 1
                self.requeued += len(lost)
                self.cond.notify_all()
            return True
        with self.cond:
            for request, episode in finished:
                self.dispatcher.returned(request)
                self.buffer.add(request, episode)
            self.cond.notify_all()
        return True

    def _admit(self, worker: Worker) -> None:
        while len(worker.inflight) < self.capacity:
            request = self.dispatcher.next()
            if request is None:
                return
            self.buffer.opened(request.group)
            worker.admit(request)
