"""Helpers of the rules across config sections: options set away from their defaults that
cannot take effect are errors naming the keys. While ``noting``, the rules also record every key
they name as read by no code path of the run, set or not (``posttrain config explain
--unused``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from posttrain.config.section import Section

_NOTED: ContextVar[dict[str, str] | None] = ContextVar("noted", default=None)


@contextmanager
def noting() -> Iterator[dict[str, str]]:
    """Within it, ``note`` records keys in the dict it yields (dotted key -> why no code path
    of the run reads it; a section's name stands for all its keys)."""
    noted: dict[str, str] = {}
    token = _NOTED.set(noted)
    try:
        yield noted
    finally:
        _NOTED.reset(token)


def note(keys: Iterable[str], why: str) -> None:
    """Record ``keys`` as read by no code path of this run, for ``why`` (only while
    ``noting``; the first reason given for a key stays)."""
    noted = _NOTED.get()
    if noted is not None:
        for key in keys:
            noted.setdefault(key, why)


def sections(tree: Any) -> Iterator[Section]:
    """Every section in ``tree`` (a section, or a dict or list holding sections), each before
    the sections it holds."""
    if isinstance(tree, Section):
        yield tree
        tree = [getattr(tree, name) for name in type(tree).model_fields]
    for value in tree.values() if isinstance(tree, dict) else tree \
            if isinstance(tree, list) else ():
        yield from sections(value)


def default_of(section, key: str) -> Any:
    """The default of field ``key`` of ``section`` (a config section, or a dataclass such as
    ``Compaction``)."""
    if dataclasses.is_dataclass(section):
        f = next(f for f in dataclasses.fields(section) if f.name == key)
        return f.default_factory() if f.default is dataclasses.MISSING else f.default
    return type(section).model_fields[key].get_default(call_default_factory=True)


def _fields(section) -> list[str]:
    """The names of the fields of ``section`` (a config section or a dataclass)."""
    return [f.name for f in dataclasses.fields(section)] if dataclasses.is_dataclass(
        section) else list(type(section).model_fields)


def _dotted(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def changed(section, prefix: str, keys: Sequence[str] | None = None) -> list[str]:
    """The dotted names (``prefix.key``) of the fields of ``section``, or of ``keys`` among
    them, set away from their defaults."""
    return [_dotted(prefix, k) for k in (_fields(section) if keys is None else keys)
            if getattr(section, k) != default_of(section, k)]


def unread(section, prefix: str, keys: Sequence[str] | None, why: str) -> None:
    """``keys`` of ``section`` (null: every field) are read by no code path of this run: an
    error naming those set away from their defaults, and ``why``. (Every rule that calls it
    names only unread keys, never the switch that makes them so: ``note`` records them all.)"""
    note((_dotted(prefix, k) for k in (_fields(section) if keys is None else keys)), why)
    names = changed(section, prefix, keys)
    if names:
        raise ValueError(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set but "
                         f"cannot take effect: {why}")


def applies(section, prefix: str, table: dict[str, Container], current: str, what: str) -> None:
    """Each key of ``table`` set away from its default acts only when ``what`` (whose value
    is ``current``) is one of the key's entries."""
    for key, allowed in table.items():
        if current in allowed:
            continue
        why = f"{_dotted(prefix, key)} applies to {what} in {allowed}, not {current}"
        note([_dotted(prefix, key)], why)
        if changed(section, prefix, [key]):
            raise ValueError(why)
