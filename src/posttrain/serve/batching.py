"""Generation for many sessions at once: concurrent requests are gathered into one engine call.

``Batcher.generate`` queues a request's prompts and waits; one worker thread takes the queued
requests (waiting up to ``window_s`` after the first for others, up to ``max_rows`` rows),
groups those that sample alike (everything but the seed), and runs one ``engine.generate`` per
group with each row's own seed. The engine's samples depend on a row's seed, not on its batch
(``TorchEngine``'s counter-based sampler), so a request gets the same completions however it
was batched. The engine is only ever called from the worker, one call at a time.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass

from posttrain.engines import Engine, GenerationOutput
from posttrain.engines.sampling import resolve_seeds
from posttrain.types import SamplingParams


@dataclass
class _Job:
    prompts: list[list[int]]
    sampling: SamplingParams
    seeds: list[int]
    result: Future


class Batcher:
    def __init__(self, engine: Engine, window_s: float = 0.005, max_rows: int = 256) -> None:
        self.engine, self.window_s, self.max_rows = engine, window_s, max_rows
        self.calls: list[int] = []  # rows of each engine call (for the load figures)
        self._queue: queue.Queue[_Job] = queue.Queue()
        threading.Thread(target=self._work, daemon=True, name="batcher").start()

    def generate(self, prompts: list[list[int]], sampling: SamplingParams
                 ) -> list[GenerationOutput]:
        """``engine.generate(prompts, sampling)``'s answer, computed in a shared batch."""
        job = _Job(prompts, sampling, resolve_seeds(len(prompts), sampling, None), Future())
        self._queue.put(job)
        return job.result.result()

    def _gather(self) -> list[_Job]:
        jobs = [self._queue.get()]
        rows, deadline = len(jobs[0].prompts), time.monotonic() + self.window_s
        while rows < self.max_rows:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            jobs.append(job)
            rows += len(job.prompts)
        return jobs

    def _work(self) -> None:
        while True:
            groups: dict[SamplingParams, list[_Job]] = defaultdict(list)
            for job in self._gather():
                groups[dataclasses.replace(job.sampling, seed=None)].append(job)
            for sampling, jobs in groups.items():
                prompts = [p for j in jobs for p in j.prompts]
                try:
                    outs = self.engine.generate(prompts, sampling,
                                                [s for j in jobs for s in j.seeds])
                except Exception as exc:  # every waiting request learns of it
                    for j in jobs:
                        j.result.set_exception(exc)
                    continue
                self.calls.append(len(prompts))
                at = 0
                for j in jobs:
                    j.result.set_result(outs[at:at + len(j.prompts)])
                    at += len(j.prompts)
