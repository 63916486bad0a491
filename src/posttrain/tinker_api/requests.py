"""Requests as futures: each runs on one worker thread (the model is shared), a training
client's in ``seq_id`` order whatever order they arrive in (the SDK sends the next before the
last has run, and a large batch's chunks at once); a resubmitted ``(model_id, seq_id)`` gets
its first request's id. Results are kept for ``retrieve_future`` (the last ``KEEP``)."""

from __future__ import annotations

import concurrent.futures
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

KEEP = 10_000


class Requests:
    def __init__(self) -> None:
        self.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tinker")
        self.results: OrderedDict[str, concurrent.futures.Future] = OrderedDict()
        self._ids = (f"req-{i}" for i in itertools.count(1))
        self._next: dict[str, int] = {}  # model id -> the seq_id it runs next
        self._waiting: dict[str, dict[int, tuple[concurrent.futures.Future, Callable]]] = {}
        self._seen: dict[tuple[str, int], str] = {}

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
        self.worker.submit(job)

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
