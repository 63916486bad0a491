"""``AsyncRollout``: a rollout thread that keeps a ``RolloutWorker`` busy while the trainer
trains, feeding a ``RolloutBuffer`` under the ``Dispatcher``'s pacing.

The engine is touched by the rollout thread only. The trainer asks for work on it (a weight
sync, an evaluation) with ``call``; the thread runs it at its next chunk boundary — with
``drain=True`` only once the samples in flight have finished (no partial rollout). A call that
does not start within its timeout raises ``WeightSyncError``: a hang is an error, never a
silent stall. An exception on the rollout thread is re-raised in the trainer's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from posttrain.pipelines.buffer import RolloutBuffer
from posttrain.pipelines.dispatch import Dispatcher
from posttrain.pipelines.rollout_worker import RolloutWorker
from posttrain.pipelines.weight_sync import WeightSyncError
from posttrain.types import Episode


class AsyncRollout:
    def __init__(self, worker: RolloutWorker, dispatcher: Dispatcher, buffer: RolloutBuffer,
                 capacity: int) -> None:
        self.worker, self.dispatcher, self.buffer = worker, dispatcher, buffer
        self.capacity = capacity
        self.cond = threading.Condition()
        self.rollout_idle_s = 0.0
        self.trainer_wait_s = 0.0
        self._job: tuple[Callable[[], Any], bool, Future] | None = None
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="posttrain-rollout", daemon=True)

    # -- trainer side ------------------------------------------------------------------------
    def __enter__(self) -> AsyncRollout:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        self._thread.join()

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

    def call(self, fn: Callable[[], Any], drain: bool, timeout: float | None = None) -> Any:
        """Run ``fn`` on the rollout thread at its next chunk boundary (after the in-flight
        samples finish if ``drain``); returns its result or raises its exception."""
        future: Future = Future()
        with self.cond:
            self._raise()
            self._job = (fn, drain, future)
            self.cond.notify_all()
        start = time.perf_counter()
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self._job is None or self._error is not None, timeout=timeout)
            if not ok:
                self._job = None
                raise WeightSyncError(
                    f"the rollout thread did not reach a sync point within {timeout:g} s "
                    f"({len(self.worker.inflight)} samples in flight)")
            self._raise()
        self.trainer_wait_s += time.perf_counter() - start
        return future.result()

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError("the rollout thread failed") from self._error

    # -- rollout thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self._loop_once():
                pass
        except BaseException as exc:  # handed to the trainer thread
            with self.cond:
                self._error = exc
                self.cond.notify_all()

    def _loop_once(self) -> bool:
        with self.cond:
            if self._stop:
                return False
            job = self._job
            if job is not None and (not job[1] or not self.worker.inflight):
                self._job = None
            else:
                job = None
                if self._job is None:  # a pending drain admits nothing new
                    self._admit()
                if not self.worker.inflight:
                    start = time.perf_counter()
                    self.cond.wait()
                    self.rollout_idle_s += time.perf_counter() - start
                    return True
        if job is not None:
            fn, _, future = job
            try:
                future.set_result(fn())
            except BaseException as exc:  # the trainer re-raises it
                future.set_exception(exc)
            with self.cond:
                self.cond.notify_all()
            return True
        finished = self.worker.step()
        with self.cond:
            for request, episode in finished:
                self.dispatcher.returned(request)
                self.buffer.add(request, episode)
            self.cond.notify_all()
        return True

    def _admit(self) -> None:
        while len(self.worker.inflight) < self.capacity:
            request = self.dispatcher.next()
            if request is None:
                return
            self.buffer.opened(request.group)
            self.worker.admit(request)
