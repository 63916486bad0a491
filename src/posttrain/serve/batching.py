"""Generation for many sessions at once: concurrent requests are gathered into one engine call.

``Batcher.generate`` queues a request's prompts and waits; one worker thread takes the queued
requests (waiting up to ``window_s`` after the first for others, up to ``max_rows`` rows),
groups those that sample alike (everything but the seed), and runs one ``engine.generate`` per
group with each row's own seed. The engine's samples depend on a row's seed, not on its batch
(``TorchEngine``'s counter-based sampler), so a request gets the same completions however it
was batched. The engine is only ever called from the worker, one call at a time; an engine
that restarted (``EngineRestarted``) is asked once more.

``generate_quick`` does the same with quick instructions answered after each prompt
(``TorchEngine.generate_quick``); requests asking the same instructions share a call.

``pause`` refuses new requests (``EngineBusy``) and waits until none is queued or running, so
the engine's weights can change under nobody; ``resume`` lets requests in again; ``close``
ends the worker. ``exclusive`` gives the engine to its caller without refusing anyone: new
requests wait until it is done and then run (under the weights it left); ``waiting`` counts
them (``await_waiting`` blocks until it reaches a number).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

from posttrain.engines import Engine, EngineRestarted, GenerationOutput
from posttrain.engines.quick import QuickOutput
from posttrain.engines.sampling import resolve_seeds
from posttrain.types import SamplingParams


class EngineBusy(RuntimeError):
    """The engine is paused (its weights are being changed): the request was not run."""


@dataclass
class _Job:
    prompts: list[list[int]]
    sampling: SamplingParams
    seeds: list[int]
    result: Future
    quick: tuple[int, ...] = ()


class Batcher:
    def __init__(self, engine: Engine, window_s: float = 0.005, max_rows: int = 256) -> None:
        self.engine, self.window_s, self.max_rows = engine, window_s, max_rows
        self.engine_calls = self.rows = self.most_rows = 0  # the load figures
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._state = threading.Condition()
        self._pending, self._paused, self._held = 0, False, False
        self.waiting = 0  # requests waiting for the holder of ``exclusive``
        threading.Thread(target=self._work, daemon=True, name="batcher").start()

    def generate(self, prompts: list[list[int]], sampling: SamplingParams
                 ) -> list[GenerationOutput]:
        """``engine.generate(prompts, sampling)``'s answer, computed in a shared batch."""
        return self._submit(prompts, sampling, ())

    def generate_quick(self, prompts: list[list[int]], sampling: SamplingParams,
                       quick: tuple[int, ...]) -> list[QuickOutput]:
        """``engine.generate_quick(prompts, sampling, quick)``'s answer (instructions asked
        after each prompt), computed in a shared batch."""
        return self._submit(prompts, sampling, quick)

    def _submit(self, prompts: list[list[int]], sampling: SamplingParams,
                quick: tuple[int, ...]) -> list:
        job = _Job(prompts, sampling, resolve_seeds(len(prompts), sampling, None), Future(),
                   quick)
        with self._state:
            if self._held:
                self.waiting += 1
                self._state.notify_all()
                self._state.wait_for(lambda: not self._held)
                self.waiting -= 1
            if self._paused:
                raise EngineBusy("the engine is paused while its weights change; retry")
            self._pending += 1
        self._queue.put(job)
        try:
            return job.result.result()
        finally:
            with self._state:
                self._pending -= 1
                self._state.notify_all()

    def pause(self, timeout_s: float | None = None) -> None:
        """Refuse new requests and wait until the queued and running ones are done."""
        with self._state:
            self._paused = True
            self._wait_idle(timeout_s)

    @contextmanager
    def exclusive(self, timeout_s: float | None = None) -> Iterator[Engine]:
        """The engine, to the caller alone: new requests wait (they are not refused) and the
        queued and running ones finish first; on exit the waiting ones go on."""
        with self._state:
            self._state.wait_for(lambda: not self._held)
            self._held = True
        try:
            with self._state:
                self._wait_idle(timeout_s)
            yield self.engine
        finally:
            with self._state:
                self._held = False
                self._state.notify_all()

    def await_waiting(self, n: int, timeout_s: float | None = None) -> bool:
        """Until ``n`` requests wait for the holder of ``exclusive``; False if ``timeout_s``
        passed first."""
        with self._state:
            return self._state.wait_for(lambda: self.waiting >= n, timeout_s)

    def _wait_idle(self, timeout_s: float | None) -> None:
        """Until no request is queued or running (the caller holds ``_state``)."""
        if not self._state.wait_for(lambda: self._pending == 0, timeout_s):
            raise TimeoutError(f"{self._pending} requests still running after {timeout_s} s")

    def resume(self) -> None:
        with self._state:
            self._paused = False

    def close(self) -> None:
        self._queue.put(None)

    def _gather(self) -> list[_Job] | None:
        if (first := self._queue.get()) is None:
            return None
        jobs, rows = [first], len(first.prompts)
        deadline = time.monotonic() + self.window_s
        while rows < self.max_rows:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)  # close after this round
                break
            jobs.append(job)
            rows += len(job.prompts)
        return jobs

    def _run(self, prompts, sampling, seeds, quick) -> list:
        def once() -> list:
            if quick:
                return self.engine.generate_quick(prompts, sampling, quick, seeds=seeds,
                                                  at="prompt")
            return self.engine.generate(prompts, sampling, seeds)

        try:
            return once()
        except EngineRestarted:  # its lost work, once more
            return once()

    def _work(self) -> None:
        while (gathered := self._gather()) is not None:
            groups: dict[tuple[SamplingParams, tuple[int, ...]], list[_Job]] = defaultdict(list)
            for job in gathered:
                groups[dataclasses.replace(job.sampling, seed=None), job.quick].append(job)
            for (sampling, quick), jobs in groups.items():
                prompts = [p for j in jobs for p in j.prompts]
                try:
                    outs = self._run(prompts, sampling, [s for j in jobs for s in j.seeds],
                                     quick)
                except Exception as exc:  # every waiting request learns of it
                    for j in jobs:
                        j.result.set_exception(exc)
                    continue
                self.engine_calls += 1
                self.rows += len(prompts)
                self.most_rows = max(self.most_rows, len(prompts))
                at = 0
                for j in jobs:
                    j.result.set_result(outs[at:at + len(j.prompts)])
                    at += len(j.prompts)
