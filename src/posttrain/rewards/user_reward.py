"""Reward functions named by dotted path, called as their signatures ask.

A function takes, by parameter name, what it needs of a sample: ``completion`` (text),
``completion_ids``, ``reference``, ``prompt`` (the chat messages), ``row`` (the dataset row's
columns) or any column of the row by its own name. With a parameter ``completions`` it is
batched: it gets lists (``completions``, ``completion_ids``, ``references``, ``prompts``,
``rows``, a column's values) and returns a list. A function with neither is called as
``f(completion, reference)``. It may be ``async``. It returns, per sample, a number, a dict of
numbers (reward parts pick an entry with ``key``) or None (missing).

A call that raises, outlives ``timeout_s``, or returns anything else (a string, NaN, a list
of the wrong length) leaves its samples' values missing with the reason; the run goes on. A
sync call cannot be stopped once started: the thread of one that timed out runs on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PER_SAMPLE = {"completion", "completion_ids", "reference", "prompt", "row"}
BATCHED = {"completions": "completion", "completion_ids": "completion_ids",
           "references": "reference", "prompts": "prompt", "rows": "row"}


@dataclass(frozen=True)
class Sample:
    """What a reward function may read of one sample."""

    completion: str
    reference: str = ""
    completion_ids: tuple[int, ...] = ()
    prompt: tuple[dict, ...] = ()
    row: Mapping[str, Any] = field(default_factory=dict)

    def input(self, name: str) -> Any:
        """The value of parameter ``name``: a field, else the row's column."""
        if name in PER_SAMPLE:
            value = getattr(self, name)
            return list(value) if isinstance(value, tuple) else value
        if name not in self.row:
            raise KeyError(f"asks for {name!r}, which is neither a sample field "
                           f"({', '.join(sorted(PER_SAMPLE))}) nor a column of the row")
        return self.row[name]


class Missing:
    """A value a reward function did not give, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Missing({self.reason!r})"


def checked(value: Any) -> float | dict[str, float] | Missing:
    """A returned value as a float or a dict of floats; anything else is ``Missing``."""
    if value is None:
        return Missing("returned None")
    if isinstance(value, Mapping):
        out = {k: checked(v) for k, v in value.items()}
        bad = next((v for v in out.values() if not isinstance(v, float)), None)
        return bad if bad is not None else out
    if isinstance(value, bool | int | float) and math.isfinite(value):
        return float(value)
    return Missing(f"returned {value!r}, not a number, a dict of numbers or None")


class UserReward:
    """``fn`` wrapped to score a batch of ``Sample``s (see the module docstring)."""

    def __init__(self, fn: Callable, timeout_s: float = 30.0) -> None:
        self.fn, self.timeout_s = fn, timeout_s
        params = inspect.signature(fn).parameters
        self.batched = "completions" in params
        self.named = self.batched or "completion" in params
        self.params = [p for p, v in params.items()
                       if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
        self.is_async = inspect.iscoroutinefunction(fn)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "posttrain-reward")

    def _arguments(self, samples: Sequence[Sample]) -> list[tuple[tuple, dict]]:
        """``(args, kwargs)`` of each call."""
        if self.batched:
            return [((), {p: [s.input(BATCHED.get(p, p)) for s in samples]
                          for p in self.params})]
        if self.named:
            return [((), {p: s.input(p) for p in self.params}) for s in samples]
        return [((s.completion, s.reference), {}) for s in samples]

    def _run(self, calls: list[tuple[tuple, dict]]) -> list[Any]:
        """The calls' results (an exception as its value), each within ``timeout_s``."""
        if self.is_async:
            async def every():
                return await asyncio.gather(
                    *(asyncio.wait_for(self.fn(*a, **k), self.timeout_s) for a, k in calls),
                    return_exceptions=True)

            results = self._wait(lambda: asyncio.run(every()), self.timeout_s + 1.0)
            # the loop itself failed or hung (a blocking call in a coroutine): every call did
            return [results] * len(calls) if isinstance(results, BaseException) else results
        return [self._wait(lambda a=a, k=k: self.fn(*a, **k), self.timeout_s) for a, k in calls]

    def _wait(self, call: Callable[[], Any], timeout: float) -> Any:
        future = self._pool.submit(call)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            self._pool.shutdown(wait=False)  # the stuck thread runs on; later calls get another
            self._pool = concurrent.futures.ThreadPoolExecutor(1, "posttrain-reward")
            return TimeoutError(f"took over {self.timeout_s:g} s")
        except Exception as e:
            return e

    def __call__(self, samples: Sequence[Sample]) -> list[float | dict[str, float] | Missing]:
        try:
            calls = self._arguments(samples)
        except KeyError as e:
            return [Missing(e.args[0])] * len(samples)
        results = self._run(calls)
        if self.batched:
            (result,) = results
            if isinstance(result, BaseException):
                return [Missing(_reason(result))] * len(samples)
            if not isinstance(result, Sequence) or len(result) != len(samples):
                return [Missing(f"returned {type(result).__name__} for a batch of "
                                f"{len(samples)}, not a list of {len(samples)}")] * len(samples)
            results = list(result)
        return [Missing(_reason(r)) if isinstance(r, BaseException) else checked(r)
                for r in results]


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
