"""Families: the open sets of interchangeable pieces a config names (``task.name``,
``engine.name``, a judge's ``kind``, a reward part's ``verifier``). A member is one module that
owns its config section (a subclass of its family's base section, decorated ``@member(family,
name)``), the cross-section rules that concern only it (``check``) and what it builds
(``build``); a verifier member is a decorated function.

``families.json`` maps each family's names to their sections (``module:Class``), so a config
names a member without any other member's module being imported; a member's module imports
no heavy library at its top (the section is validated without torch). ``python
tools/families.py`` rewrites the index from the ``@member`` decorators in the source, and a
test keeps it current. A name that is a dotted path (``my_pkg.engines:MyEngine``) selects the
user's own section class, or, for a family with a ``PATH`` member, that member (which then
loads the named function: a task source, say).

>>> from posttrain.config.family import member_of
>>> member_of("task", "lookup").__name__
'LookupConfig'
"""

from __future__ import annotations

import ast
import importlib
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    Field,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from posttrain.config.extension import is_path, load_object
from posttrain.config.section import Section

INDEX = Path(__file__).with_name("families.json")
PATH = "<dotted path>"  # the member a family's dotted-path names select, if it has one


class Member(Section):
    """A family member's section: its field ``KEY`` (``name``, or ``kind`` for judges)
    selects it, filled in when omitted. The family's base section declares that field."""

    FAMILY: ClassVar[str]
    KEY: ClassVar[str] = "name"
    NAME: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.KEY not in data and hasattr(cls, "NAME"):
            data = {**data, cls.KEY: cls.NAME}
        if isinstance(data, dict):
            data = _without_others_defaults(cls, data)
        return data


def member(family: str, name: str, **traits: Any) -> Callable[[Any], Any]:
    """Decorator: the section class of ``family``'s member ``name`` (``PATH``: the member a
    dotted-path name selects), or for a family of functions (``verifier``) the function, with
    ``traits`` as its attributes. ``tools/families.py`` reads it from the source."""

    def register(obj: Any) -> Any:
        obj.FAMILY, obj.NAME = family, name
        for key, value in traits.items():
            setattr(obj, key, value)
        return obj

    return register


@cache
def index() -> dict[str, dict[str, str]]:
    """``family -> name -> module:Class``, as ``families.json`` holds it."""
    return json.loads(INDEX.read_text())


def names(family: str) -> list[str]:
    """The built-in members of ``family``."""
    return [n for n in index()[family] if n != PATH]


def member_of(family: str, name: str) -> Any:
    """What ``family``'s member ``name`` registered, its module imported on demand: a section
    class, or a function (verifiers)."""
    known = index()[family]
    if name in known:
        module, attr = known[name].split(":")
        return getattr(importlib.import_module(module), attr)
    if is_path(name):
        found = load_object(name)
        if isinstance(found, type) and issubclass(found, Member) and found.FAMILY == family:
            return found
        if PATH in known:
            return member_of(family, PATH)
        raise ValueError(f"{name!r} is not a {family} section (a class decorated "
                         f"@member({family!r}, ...))")
    raise ValueError(f"unknown {family} {name!r}; built in: {', '.join(names(family))}, or a "
                     "dotted path (package.module:name)")


def _without_others_defaults(cls: type[Member], data: dict) -> dict:
    """``data`` less the keys this member lacks but other members of its family take, left at
    those members' defaults or null (a full config file names another member's keys; switching
    ``name`` keeps it valid). Set away from them, such a key is an error naming its members."""
    family, kept = getattr(cls, "FAMILY", None), dict(data)
    for key, value in data.items():
        if family is None or key in cls.model_fields:
            continue
        takers = {n: member_of(family, n).model_fields[key] for n in names(family)
                  if key in member_of(family, n).model_fields}
        if takers and all(_at_default(f, value) for f in takers.values()):
            del kept[key]
        elif takers:
            raise _at(key, f"applies to {cls.KEY} in ({', '.join(takers)}), not {data[cls.KEY]}")
    return kept


def _at_default(field: Any, value: Any) -> bool:
    """Whether ``value`` (as given in a config) is ``field``'s default, or null (unset)."""
    if value is None or field.is_required():
        return value is None
    adapter = TypeAdapter(field.annotation)
    try:
        given = adapter.validate_python(value)
    except ValueError:
        return False
    default = field.get_default(call_default_factory=True)
    return adapter.dump_python(given, mode="json") == adapter.dump_python(default, mode="json")


def chosen(base: type[Member], default: str) -> Any:
    """The type of a field holding a member of ``base``'s family, which its ``name`` selects
    (``default`` when the section or its name is not given). Dumped with the member's keys."""
    family, key = base.FAMILY, base.KEY

    def pick(value: Any, handler: Any) -> Member:
        if isinstance(value, Member):
            return value
        data = dict(value or {})
        name = data.setdefault(key, default)
        try:
            if not isinstance(name, str):
                raise ValueError("a member's name or a dotted path is expected")
            cls = member_of(family, name)
        except ValueError as e:  # reported at the key: task.name
            raise _at(key, str(e)) from None
        return cls.model_validate(data)

    return Annotated[SerializeAsAny[base], WrapValidator(pick)]


def default_member(base: type[Member], name: str, description: str) -> Any:
    """A field's default: ``base``'s family member ``name`` with its defaults; the field is
    described by ``description``."""
    return Field(default_factory=lambda: member_of(base.FAMILY, name)(), description=description)


def _at(key: str, message: str) -> ValidationError:
    """An error of the section's field ``key`` (reported as ``task.name: ...``)."""
    return ValidationError.from_exception_data("member", [InitErrorDetails(
        type="value_error", loc=(key,), input=None, ctx={"error": ValueError(message)})])


def scan(src: Path) -> dict[str, dict[str, str]]:
    """``family -> name -> module:attr`` for every ``@member(family, name)`` class or function
    under ``src`` (the directory holding the ``posttrain`` package), read from the source."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(src.rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "member":
                    family, name = (_literal(a) for a in dec.args[:2])
                    found.setdefault(family, {})[name] = f"{module}:{node.name}"
    return {f: dict(sorted(m.items())) for f, m in sorted(found.items())}


def _literal(node: ast.expr) -> str:
    """A decorator argument: a string, or the name ``PATH``."""
    return PATH if isinstance(node, ast.Name) and node.id == "PATH" else ast.literal_eval(node)
