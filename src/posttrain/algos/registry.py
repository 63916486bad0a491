"""The algorithm catalogue: ``(kind, canonical name) -> function`` with aliases and sources.

Config values are the canonical names (docs/algorithms.md); the names other frameworks use
(verl, TRL, OpenRLHF, slime, AReaL) are accepted as aliases, and ``-`` and ``_`` are
interchangeable (``seq-mean-token-mean``).

An entry's module is imported when the entry is first asked for. What config validation needs
(names, aliases, inputs, parameters: ``facts``) is read from ``index.json`` without importing
any entry, so a config is checked without torch; ``posttrain algorithms --index`` writes the
file and a test keeps it current.

Wherever a name is asked for, a dotted path (``my_pkg.mod:fn``, ``path/to/file.py:fn``) names
a function of the user's instead: it is loaded on first use and is its own canonical name, with
the traits (``output``, ``feeds``) its ``register`` declared, if any. Paths are not catalogue
names: ``names`` and ``entries`` list only registered ones.

>>> from posttrain.algos import get, names
>>> get("aggregation", "token-mean") is get("aggregation", "dapo")
True
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from posttrain.types.dotted import ExtensionError, is_path, load_object

KINDS = (
    "advantage", "policy_loss", "aggregation", "kl", "offpolicy", "shaping", "divergence",
    "preference", "reward_model", "reward", "metric",
)
# what an entry's result is, for the kinds whose callers combine several entries' results
OUTPUTS = {"advantage": ("episode", "step", "token"), "shaping": ("bonus", "cost", "reward"),
           "reward": ("reward", "step")}


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
class Parameter:
    """A parameter of an entry's function; ``data`` ones (tensors, sequences) are the caller's
    inputs, the others hyperparameters; ``default``: its default where it has a number, a
    string or a bool for one (else None)."""

    name: str
    required: bool
    data: bool
    default: Any = None


@dataclass(frozen=True)
class Facts:
    """What is known of an entry without importing its module: where it lives, its names, what
    its result is, its parameters and the caller's inputs that fill them (``feeds``: see
    ``Entry``). ``supplied``: the inputs a caller supplies by name, whose parameters are not
    the entry's options even when nothing marks them as data (a user's unannotated ``logp``)."""

    kind: str
    name: str
    aliases: tuple[str, ...]
    module: str
    output: str
    parameters: tuple[Parameter, ...]
    feeds: Mapping[str, str] = field(default_factory=dict)

    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def inputs(self) -> dict[str, str]:
        """Parameter -> the name of the caller's input that fills it (``feeds``, or its own)."""
        return {p.name: self.feeds.get(p.name, p.name) for p in self.parameters}

    def takes(self, name: str) -> bool:
        """Whether the entry asks for the input ``name``."""
        return name in self.inputs().values()

    def _options(self, supplied: Collection[str]) -> list[Parameter]:
        inputs = self.inputs()
        return [p for p in self.parameters if not p.data and inputs[p.name] not in supplied]

    def hyperparameters(self, supplied: Collection[str] = ()) -> dict[str, bool]:
        """Keyword parameters that are neither data nor ``supplied``: ``name -> required``."""
        return {p.name: p.required for p in self._options(supplied)}

    def defaults(self, supplied: Collection[str] = ()) -> dict[str, Any]:
        """The hyperparameters' defaults that are values (``eps_high -> 0.2``)."""
        return {p.name: p.default for p in self._options(supplied)
                if not p.required and p.default is not None}

    def unsupplied(self, supplied: Collection[str]) -> list[str]:
        """The inputs of required data parameters that are not ``supplied``."""
        inputs = self.inputs()
        return [inputs[p.name] for p in self.parameters
                if p.required and p.data and inputs[p.name] not in supplied]


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
        return self.facts().inputs()

    def takes(self, name: str) -> bool:
        """Whether the entry asks for the input ``name``."""
        return self.facts().takes(name)

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

    def facts(self) -> Facts:
        """Its ``Facts``, read from the function: a parameter annotated as a tensor or a
        sequence is data."""
        parameters = tuple(
            Parameter(p.name, p.default is inspect.Parameter.empty,
                      any(t in str(p.annotation) for t in ("Tensor", "Sequence")),
                      p.default if isinstance(p.default, int | float | str) else None)
            for p in inspect.signature(self.fn).parameters.values())
        return Facts(self.kind, self.name, self.aliases, self.fn.__module__, self.output,
                     parameters, self.feeds)

    def hyperparameters(self) -> dict[str, bool]:
        return self.facts().hyperparameters()


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
_LOOKUP: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
_PATHS: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}  # by dotted path
DECLARED = "__posttrain_entries__"  # a registered function's attribute: its Entry by kind
INDEX = Path(__file__).with_name("index.json")


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


@cache
def _index() -> tuple[dict[str, dict[str, Facts]], dict[str, dict[str, str]]]:
    """The built-in entries' ``Facts`` by kind and name, and their spellings by kind."""
    facts = {kind: {} for kind in KINDS}
    lookup = {kind: {} for kind in KINDS}
    for kind, rows in json.loads(INDEX.read_text()).items():
        for name, row in rows.items():
            facts[kind][name] = Facts(kind, name, tuple(row["aliases"]), row["module"],
                                      row["output"],
                                      tuple(Parameter(*p) for p in row["parameters"]),
                                      row["feeds"])
            lookup[kind].update(dict.fromkeys(map(_key, (name, *row["aliases"])), name))
    return facts, lookup


def index_rows(catalogue: list[Entry]) -> dict[str, dict[str, dict]]:
    """The contents of ``index.json`` for ``catalogue``."""
    rows: dict[str, dict[str, dict]] = {kind: {} for kind in KINDS}
    for e in catalogue:
        f = e.facts()
        rows[e.kind][e.name] = {"aliases": list(f.aliases), "module": f.module, "output": f.output,
                                "parameters": [[p.name, p.required, p.data, p.default]
                                               for p in f.parameters],
                                "feeds": dict(f.feeds)}
    return rows


def register(
    kind: str, name: str | None = None, *, aliases: tuple[str, ...] = (), source: str = "",
    feeds: Mapping[str, str] | None = None, output: str = "",
) -> Callable[[Callable], Callable]:
    """Decorator: add ``fn`` to the catalogue as ``kind``/``name`` (``feeds``, ``output``:
    see ``Entry``; ``output`` one of ``OUTPUTS[kind]``), or, without a name, only declare
    those traits for a config that names ``fn`` by dotted path. A spelling already taken by an
    entry, imported or not, is an error."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    if output and output not in OUTPUTS.get(kind, ()):
        raise ValueError(f"{kind} output {output!r}: one of {', '.join(OUTPUTS.get(kind, ()))}")

    def decorate(fn: Callable) -> Callable:
        declared = Entry(kind, name or "", fn, tuple(aliases), source, dict(feeds or {}), output)
        if name is not None:
            keys = [_key(n) for n in (name, *aliases)]
            spellings = _index()[1][kind]
            for key in keys:
                if key in _LOOKUP[kind] or spellings.get(key, name) != name:
                    raise ValueError(f"{kind} {key!r} is already registered")
            _LOOKUP[kind].update(dict.fromkeys(keys, name))
            _ENTRIES[kind][name] = declared
        fn.__dict__.setdefault(DECLARED, {})[kind] = declared
        return fn

    return decorate


def canonical(kind: str, name: str) -> str:
    """The canonical name of a name or alias of ``kind``; unknown names raise ``KeyError``
    listing the known ones. Imports nothing, but a dotted path's module (an
    ``ExtensionError`` says why one does not load)."""
    if kind not in KINDS:
        raise KeyError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    if is_path(name):
        return _by_path(kind, name).name
    key = _key(name)
    found = _LOOKUP[kind].get(key) or _index()[1][kind].get(key)
    if found is None:
        raise KeyError(f"unknown {kind} {name!r}; known: {', '.join(names(kind))}; or a "
                       "function of yours by dotted path (my_pkg.module:fn, path/to/file.py:fn)")
    return found


def _by_path(kind: str, spec: str) -> Entry:
    """The entry of the function at the dotted path ``spec``, loaded once: named ``spec``,
    with the traits its ``register`` declared for ``kind`` (none if it has no decorator)."""
    if spec not in _PATHS[kind]:
        fn = load_object(spec)
        if not callable(fn):
            raise ExtensionError(f"{spec!r} is a {type(fn).__name__}, not a function")
        declared = getattr(fn, DECLARED, {}).get(kind)
        _PATHS[kind][spec] = replace(declared, name=spec, aliases=()) if declared \
            else Entry(kind, spec, fn, (), "")
    return _PATHS[kind][spec]


def facts(kind: str, name: str) -> Facts:
    """The ``Facts`` of a name or alias, without importing its module (a dotted path's
    function is loaded)."""
    name = canonical(kind, name)
    if is_path(name) or name in _ENTRIES[kind]:
        return entry(kind, name).facts()
    return _index()[0][kind][name]


def _import_all() -> None:
    """Import every module of ``posttrain.algos``, registering every built-in entry."""
    package = importlib.import_module(__package__)
    for module in pkgutil.walk_packages(package.__path__, f"{__package__}."):
        importlib.import_module(module.name)


def entry(kind: str, name: str) -> Entry:
    """The entry for a canonical name or alias, its module imported on first use; unknown
    names raise ``KeyError`` listing the known ones."""
    name = canonical(kind, name)
    if is_path(name):
        return _PATHS[kind][name]
    if name not in _ENTRIES[kind]:
        importlib.import_module(_index()[0][kind][name].module)
    return _ENTRIES[kind][name]


def get(kind: str, name: str) -> Callable:
    """The function registered as ``kind``/``name`` (canonical or alias)."""
    return entry(kind, name).fn


def names(kind: str) -> list[str]:
    """Canonical names of ``kind``, sorted (dotted paths are not names)."""
    return sorted(set(_ENTRIES[kind]) | set(_index()[0][kind]))


def entries() -> list[Entry]:
    """Every entry, by kind (in ``KINDS`` order) then name; imports every built-in."""
    _import_all()
    return [_ENTRIES[k][n] for k in KINDS for n in sorted(_ENTRIES[k])]
