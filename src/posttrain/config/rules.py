"""Helpers of the rules across config sections: options set away from their defaults that
cannot take effect are errors naming the keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterator, Sequence
from typing import Any

from posttrain.config.section import Section


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


def changed(section, prefix: str, keys: Sequence[str] | None = None) -> list[str]:
    """The dotted names (``prefix.key``) of the fields of ``section``, or of ``keys`` among
    them, set away from their defaults."""
    if keys is None:
        keys = [f.name for f in dataclasses.fields(section)] if dataclasses.is_dataclass(
            section) else list(type(section).model_fields)
    return [f"{prefix}.{k}" if prefix else k for k in keys
            if getattr(section, k) != default_of(section, k)]


def unread(section, prefix: str, keys: Sequence[str] | None, why: str) -> None:
    """``keys`` of ``section`` (null: every field) are read by no code path of this run: an
    error naming those set away from their defaults, and ``why``."""
    names = changed(section, prefix, keys)
    if names:
        raise ValueError(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set but "
                         f"cannot take effect: {why}")


def applies(section, prefix: str, table: dict[str, Container], current: str, what: str) -> None:
    """Each key of ``table`` set away from its default acts only when ``what`` (whose value
    is ``current``) is one of the key's entries."""
    for name in changed(section, prefix, list(table)):
        allowed = table[name.rsplit(".", 1)[1]]
        if current not in allowed:
            raise ValueError(f"{name} applies to {what} in {allowed}, not {current}")
