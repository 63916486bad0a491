"""The algorithm catalogue: ``(kind, canonical name) -> function`` with aliases and sources.

Config values are the canonical names of ALGORITHMS.md; the names other frameworks use (§12)
are accepted as aliases, and ``-`` and ``_`` are interchangeable (``seq-mean-token-mean``).

>>> from posttrain.algos import get, names
>>> get("aggregation", "token-mean") is get("aggregation", "dapo")
True
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = (
    "advantage", "policy_loss", "aggregation", "kl", "offpolicy", "shaping", "divergence",
    "preference", "reward_model", "metric",
)


class LazyInputs(Mapping):
    """Inputs a caller can provide, each computed on first use from its zero-argument
    function, so an entry's call computes only what the entry asks for."""

    def __init__(self, **makers: Callable[[], Any]) -> None:
        self._makers, self._values = makers, {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            self._values[name] = self._makers[name]()
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


@dataclass(frozen=True)
class Entry:
    """One registered algorithm; ``formula`` is the first paragraph of its docstring.

    ``feeds`` names the caller's input that fills a parameter of another name
    (``{"rewards": "reward_parts"}``); ``output`` says what the result is to callers that
    combine several entries' results (an advantage per ``episode``, ``step`` or ``token``; a
    shaping ``bonus`` to add, ``cost`` to subtract or a new ``reward``)."""

    kind: str
    name: str
    fn: Callable
    aliases: tuple[str, ...]
    source: str
    feeds: Mapping[str, str] = field(default_factory=dict)
    output: str = ""

    def inputs(self) -> dict[str, str]:
        """Parameter -> the name of the caller's input that fills it (``feeds``, or its own)."""
        return {p: self.feeds.get(p, p) for p in inspect.signature(self.fn).parameters}

    def takes(self, name: str) -> bool:
        """Whether the entry asks for the input ``name``."""
        return name in self.inputs().values()

    def call(self, inputs: Mapping[str, Any], **hyperparameters: Any) -> Any:
        """``fn(**hyperparameters, **asked)``: every other parameter is taken from ``inputs``
        under its input name; a required one that ``inputs`` lacks is a ``ValueError``."""
        asked = {}
        params = inspect.signature(self.fn).parameters
        for param, source in self.inputs().items():
            if param in hyperparameters:
                continue
            if source in inputs:
                asked[param] = inputs[source]
            elif params[param].default is inspect.Parameter.empty:
                raise ValueError(f"{self.kind} {self.name!r} needs {source!r}, which is not "
                                 f"available here (available: {', '.join(inputs) or 'none'})")
        return self.fn(**hyperparameters, **asked)

    @property
    def formula(self) -> str:
        doc = (self.fn.__doc__ or "").strip()
        return " ".join(doc.split("\n\n")[0].split())

    def hyperparameters(self) -> dict[str, bool]:
        """Keyword parameters that are not data (tensors, sequences): ``name -> required``."""
        out = {}
        for p in inspect.signature(self.fn).parameters.values():
            annotation = str(p.annotation)
            if "Tensor" not in annotation and "Sequence" not in annotation:
                out[p.name] = p.default is inspect.Parameter.empty
        return out


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
_LOOKUP: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def register(
    kind: str, name: str, *, aliases: tuple[str, ...] = (), source: str,
    feeds: Mapping[str, str] | None = None, output: str = "",
) -> Callable[[Callable], Callable]:
    """Decorator: add ``fn`` to the catalogue as ``kind``/``name`` (``feeds``, ``output``:
    see ``Entry``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")

    def decorate(fn: Callable) -> Callable:
        keys = [_key(n) for n in (name, *aliases)]
        for key in keys:
            if key in _LOOKUP[kind]:
                raise ValueError(f"{kind} {key!r} is already registered")
        _LOOKUP[kind].update(dict.fromkeys(keys, name))
        _ENTRIES[kind][name] = Entry(kind, name, fn, tuple(aliases), source, dict(feeds or {}),
                                     output)
        return fn

    return decorate


def entry(kind: str, name: str) -> Entry:
    """The entry for a canonical name or alias; unknown names raise ``KeyError`` listing
    the known ones."""
    if kind not in KINDS:
        raise KeyError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    try:
        return _ENTRIES[kind][_LOOKUP[kind][_key(name)]]
    except KeyError:
        raise KeyError(f"unknown {kind} {name!r}; known: {', '.join(names(kind))}") from None


def get(kind: str, name: str) -> Callable:
    """The function registered as ``kind``/``name`` (canonical or alias)."""
    return entry(kind, name).fn


def canonical(kind: str, name: str) -> str:
    return entry(kind, name).name


def names(kind: str) -> list[str]:
    """Canonical names of ``kind``, sorted."""
    return sorted(_ENTRIES[kind])


def entries() -> list[Entry]:
    """Every entry, by kind (in ``KINDS`` order) then name."""
    return [_ENTRIES[k][n] for k in KINDS for n in names(k)]
