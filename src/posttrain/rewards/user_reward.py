"""Reward functions named by dotted path, called as their signatures ask.

A function takes, by parameter name, what it needs of a sample: ``completion`` (text),
``completion_ids``, ``reference``, ``prompt`` (the chat messages), ``row`` (the dataset row's
columns) or any column of the row by its own name; a ``**kwargs`` parameter receives every
column not already passed by name (as TRL passes them). With a parameter ``completions`` it
is batched: it gets lists (``completions``, ``completion_ids``, ``references``, ``prompts``,
``rows``, a column's values) and returns a list. A function with neither is called as
``f(completion, reference)``. It may be ``async``. It returns, per sample, a number, a dict of
numbers (reward parts pick an entry with ``key``) or None (missing).

A call that raises or returns anything else (a string, NaN, a list of the wrong length)
leaves its samples' values missing with the reason. The calls run in a worker process
(``rewards.reward_worker``) that is killed when a batch outlives its timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
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


Value = float | dict[str, float] | Missing


def checked(value: Any) -> Value:
    """A returned value as a float or a dict of floats; anything else is ``Missing``. A number
    is any ``numbers.Real`` (NumPy's scalars too) or a 0-d array or tensor holding one."""
    if value is None:
        return Missing("returned None")
    if isinstance(value, Mapping):
        out = {k: checked(v) for k, v in value.items()}
        bad = next((v for v in out.values() if not isinstance(v, float)), None)
        return bad if bad is not None else out
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        value = value.item()  # a 0-d array, a NumPy bool_ or a torch scalar
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    return Missing(f"returned {value!r}, not a number, a dict of numbers or None")


def reason(error: BaseException) -> str:
    """``Type: message`` (a KeyError's message without the quotes its str adds)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else error
    return f"{type(error).__name__}: {text}"


def parameters(fn: Callable) -> tuple[list[str], bool]:
    """The names ``fn`` takes (its ``*args``/``**kwargs`` aside) and whether it takes
    ``**kwargs`` (the row's other columns)."""
    params = inspect.signature(fn).parameters.values()
    return ([p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)],
            any(p.kind == p.VAR_KEYWORD for p in params))


def unknown_columns(fn: Callable, columns: Sequence[str]) -> list[str]:
    """The parameters of ``fn`` that name neither a sample field nor one of ``columns``."""
    names, _ = parameters(fn)
    if not ({"completion", "completions"} & set(names)):
        return []  # called as f(completion, reference)
    fields = {*PER_SAMPLE, *BATCHED}
    return [p for p in names if p not in fields and p not in columns]


class UserCalls:
    """``fn`` called on a batch of ``Sample``s as the module docstring says."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.params, self.rest = parameters(fn)
        self.batched = "completions" in self.params
        self.named = self.batched or "completion" in self.params

    def _kwargs(self, sample: Sample) -> dict[str, Any]:
        kwargs = {p: sample.input(p) for p in self.params}
        if self.rest:
            kwargs |= {k: v for k, v in sample.row.items() if k not in kwargs}
        return kwargs

    def _batched_kwargs(self, samples: Sequence[Sample]) -> dict[str, Any]:
        names = list(self.params)
        if self.rest and samples:
            names += [k for k in samples[0].row if k not in names and k not in BATCHED]
        return {p: [s.input(BATCHED.get(p, p)) for s in samples] for p in names}

    def run(self, samples: Sequence[Sample], emit: Callable[[list[int], list[Value]], None]
            ) -> None:
        """``emit(indices, values)`` as the calls end: the whole batch at once for a batched
        function, else a sample at a time (async ones concurrently, as each finishes)."""
        if self.batched:
            emit(list(range(len(samples))), self._batch(samples))
        elif inspect.iscoroutinefunction(self.fn):
            asyncio.run(self._concurrently(samples, emit))
        else:
            for i, sample in enumerate(samples):
                emit([i], [self._one(sample)])

    def _call(self, sample: Sample) -> Any:
        if self.named:
            return self.fn(**self._kwargs(sample))
        return self.fn(sample.completion, sample.reference)

    def _one(self, sample: Sample) -> Value:
        try:
            return checked(self._call(sample))
        except Exception as e:
            return Missing(reason(e))

    def _batch(self, samples: Sequence[Sample]) -> list[Value]:
        n = len(samples)
        try:
            result = self.fn(**self._batched_kwargs(samples))
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
        except Exception as e:
            return [Missing(reason(e))] * n
        if not isinstance(result, Sequence) or isinstance(result, str) or len(result) != n:
            return [Missing(f"returned {type(result).__name__} for a batch of {n}, not a list "
                            f"of {n}")] * n
        return [checked(r) for r in result]

    async def _concurrently(self, samples: Sequence[Sample],
                            emit: Callable[[list[int], list[Value]], None]) -> None:
        async def one(i: int, sample: Sample) -> None:
            try:
                value = checked(await self._call(sample))
            except Exception as e:
                value = Missing(reason(e))
            emit([i], [value])

        await asyncio.gather(*(one(i, s) for i, s in enumerate(samples)))


async def _awaited(result: Any) -> Any:
    return await result
