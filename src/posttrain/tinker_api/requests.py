"""Requests as futures: each runs on one worker thread (the model is shared), a training
client's in ``seq_id`` order whatever order they arrive in (the SDK sends the next before the
last has run, and a large batch's chunks at once); a resubmitted ``(model_id, seq_id)`` gets
its first request's id. Requests submitted with ``submit_batched`` one after another (nothing
else between them) while their batch waits for the worker run as one call, so the worker sees
them in the order they came. Results are kept for ``retrieve_future`` (the last ``KEEP``)."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

KEEP = 10_000
# a batch that the worker reaches waits for more while they come: until none joined for
# BATCH_GAP_S (the SDK's concurrent requests arrived up to 40 ms apart on a loaded 2-core
# machine), BATCH_WINDOW_S after its first at most
BATCH_GAP_S, BATCH_WINDOW_S = 0.02, 0.1


@dataclass
class _Batch:
    run_all: Callable[[list], Sequence[Any]]
    items: list[tuple[concurrent.futures.Future, Any]] = field(default_factory=list)
    opened: float = field(default_factory=time.monotonic)
    joined: float = field(default_factory=time.monotonic)  # when the last item came


class Requests:
    def __init__(self) -> None:
        self.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tinker")
        self.results: OrderedDict[str, concurrent.futures.Future] = OrderedDict()
        self._ids = (f"req-{i}" for i in itertools.count(1))
        self._next: dict[str, int] = {}  # model id -> the seq_id it runs next
        self._waiting: dict[str, dict[int, tuple[concurrent.futures.Future, Callable]]] = {}
        self._seen: dict[tuple[str, int], str] = {}
        self._open: _Batch | None = None  # the batch that later requests may still join
        self._lock = threading.Lock()

    def _new(self) -> tuple[str, concurrent.futures.Future]:
        rid, future = next(self._ids), concurrent.futures.Future()
        self.results[rid] = future
        while len(self.results) > KEEP and next(iter(self.results.values())).done():
            self.results.popitem(last=False)
        return rid, future

    def _run(self, future: concurrent.futures.Future, fn: Callable[[], Any]) -> None:
        def job() -> None:
            try:
                future.set_result(fn())
            except Exception as exc:  # the client gets it as the request's error
                future.set_exception(exc)
        with self._lock:
            self._open = None  # a later batched request runs after this one
            self.worker.submit(job)

    def submit_batched(self, item: Any, run_all: Callable[[list], Sequence[Any]]) -> str:
        """A request that joins the waiting batch of ``run_all`` (or opens one): the batch
        runs as ``run_all(items)``, which answers each item with its result or the exception
        it raises."""
        rid, future = self._new()
        with self._lock:
            if self._open is None or self._open.run_all != run_all:
                self._open = _Batch(run_all)
                self.worker.submit(self._run_batch, self._open)
            self._open.items.append((future, item))
            self._open.joined = time.monotonic()
        return rid

    def _run_batch(self, batch: _Batch) -> None:
        while True:  # closed after its wait: later requests open the next batch
            with self._lock:
                wait = min(batch.joined + BATCH_GAP_S,
                           batch.opened + BATCH_WINDOW_S) - time.monotonic()
                if wait <= 0:
                    if self._open is batch:
                        self._open = None
                    break
            time.sleep(wait)
        try:
            outcomes = batch.run_all([item for _, item in batch.items])
        except Exception as exc:  # noqa: BLE001 - every request of the batch gets it
            outcomes = [exc] * len(batch.items)
        for (future, _), outcome in zip(batch.items, outcomes):
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def submit(self, fn: Callable[[], Any]) -> str:
        rid, future = self._new()
        self._run(future, fn)
        return rid

    def submit_ordered(self, model_id: str, seq_id: int, fn: Callable[[], Any]) -> str:
        if (model_id, seq_id) in self._seen:
            return self._seen[(model_id, seq_id)]
        if seq_id < self._next.setdefault(model_id, 1):
            raise ValueError(f"seq_id {seq_id} of {model_id} already ran")
        rid, future = self._new()
        self._seen[(model_id, seq_id)] = rid
        if len(self._seen) > KEEP:  # the oldest resubmission is long past
            del self._seen[next(iter(self._seen))]
        waiting = self._waiting.setdefault(model_id, {})
        waiting[seq_id] = (future, fn)
        while self._next[model_id] in waiting:
            self._run(*waiting.pop(self._next[model_id]))
            self._next[model_id] += 1
        return rid

    def close(self) -> None:
        self.worker.shutdown(wait=False, cancel_futures=True)
