"""Every key of the config tree and what it means: each field of every section carries a
one-line ``Field(description=...)`` (a dataclass section's field: ``section.described``), the
members of each family included. ``posttrain config explain`` prints a key's description beside
its value, ``python tools/config_keys.py`` writes the key reference of docs/config.md, and a test
fails on a key without a description.

A key's name is dotted; ``<name>`` stands for the names of a mapping of sections
(``reward.parts.<name>.weight``) and ``[]`` for the items of a list (``opd.teachers[].path``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from posttrain.algos.registry import facts
from posttrain.config.family import PATH, Member, index, member_of, names
from posttrain.config.schema import RunConfig
from posttrain.config.section import NamedLoss


def is_section(annotation: Any) -> bool:
    """Whether ``annotation`` is a config section: a pydantic model or a dataclass."""
    return isinstance(annotation, type) and (issubclass(annotation, BaseModel)
                                             or dataclasses.is_dataclass(annotation))


def fields(section: type) -> dict[str, tuple[str, FieldInfo]]:
    """The fields of a section class, by the key that names each in a config (its alias, else
    its name): ``(attribute name, field)``."""
    if dataclasses.is_dataclass(section):
        hints = typing.get_type_hints(section)
        return {f.name: (f.name, FieldInfo.from_annotated_attribute(hints[f.name], f))
                for f in dataclasses.fields(section)}
    return {field.alias or name: (name, field) for name, field in section.model_fields.items()}


def places(annotation: Any, name: str) -> Iterator[tuple[type, str]]:
    """The sections a field's type holds, each with the prefix of its keys: ``X`` and
    ``X | None`` at ``name.``, ``dict[str, X]`` at ``name.<name>.``, ``list[X]`` at
    ``name[].``."""
    if is_section(annotation):
        yield annotation, f"{name}."
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict:
        yield from places(args[1], f"{name}.<name>")
    elif origin is list:
        yield from places(args[0], f"{name}[]")
    else:  # a union, or Annotated (its metadata holds no section)
        for arg in args:
            yield from places(arg, name)


@dataclass(frozen=True)
class Key:
    """A config key: its dotted ``name``, its ``field``, its ``default`` here (``rl.optim.lr``:
    rl's own; ``PydanticUndefined``: required) and the family ``member`` that has it
    (``task.name=code``; None: any)."""

    name: str
    field: FieldInfo
    default: Any
    member: str | None = None


def keys(section: type = RunConfig, prefix: str = "", default: Any = None,
         member: str | None = None, expanded: set[type] | None = None,
         skip: frozenset[str] = frozenset()) -> Iterator[Key]:
    """Every key under ``section`` but those in ``skip``, each before the keys of the section
    it holds; ``default``: the section's value here (None: the class's defaults). A family's
    members follow the family's own keys, listed where the family first appears
    (``expanded``: the families listed so far)."""
    expanded = set() if expanded is None else expanded
    for key, (attr, field) in fields(section).items():
        if key in skip:
            continue
        value = getattr(default, attr) if default is not None else \
            field.get_default(call_default_factory=True)
        yield Key(f"{prefix}{key}", field, value, member)
        for sub, place in places(field.annotation, f"{prefix}{key}"):
            here = value if isinstance(value, sub) else None
            if issubclass(sub, Member) and not hasattr(sub, "NAME"):
                yield from _family(sub, place, here, member, expanded)
            else:
                yield from keys(sub, place, here, member, expanded)


def _family(base: type[Member], prefix: str, default: Member | None, member: str | None,
            expanded: set[type]) -> Iterator[Key]:
    """The keys of ``base``'s family at ``prefix`` (``default``: the member there, or None):
    the family's own, then each member's that differ (the member's own, or another default
    or meaning), tagged ``<key>=<member>``."""
    yield from keys(base, prefix, default, member, expanded)
    if base in expanded:
        return
    expanded.add(base)
    common = {k: f for k, (_, f) in fields(base).items()}
    built_in = [*names(base.FAMILY), *([PATH] if PATH in index()[base.FAMILY] else [])]
    for name in built_in:
        cls = member_of(base.FAMILY, name)
        same = frozenset(k for k, (_, f) in fields(cls).items()
                         if k in common and _same(common[k], f))
        yield from keys(cls, prefix, default if type(default) is cls else None,
                        f"{prefix}{base.KEY}={name}", expanded, same)


def _same(a: FieldInfo, b: FieldInfo) -> bool:
    return (a.annotation, a.description, a.get_default(call_default_factory=True)) == \
        (b.annotation, b.description, b.get_default(call_default_factory=True))


def describe(cfg: RunConfig, key: str) -> str:
    """What the dotted ``key`` of ``cfg``'s dump (a key ``config explain`` prints) means: its
    field's description, or, for a catalogue function's hyperparameter (``pref.loss.beta``),
    which function takes it."""
    node: Any = cfg
    field = None
    for part in key.split("."):
        if isinstance(node, dict):  # a name of a mapping of sections, or an entry of a dict
            node = node[part]
            continue
        if isinstance(node, NamedLoss) and part in (node.model_extra or {}):
            defaults = facts(node.KIND, node.name).defaults()
            shown = f"its default: {defaults[part]}; " if part in defaults else ""
            return f"a hyperparameter of the {node.LABEL} {node.name} ({shown}docs/algorithms.md)"
        attr, field = fields(type(node))[part]
        node = getattr(node, attr)
    return field.description or ""
