"""Load a ``RunConfig`` from YAML plus ``dotted.key=value`` overrides; errors name the key."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from posttrain.config.family import member_of, names
from posttrain.config.schema import RunConfig

FAMILIES = ("task", "engine")  # sections whose keys depend on their member


class ConfigError(ValueError):
    """An invalid config; the message names every offending key."""


def known_keys(section: tuple) -> set[str]:
    """The keys the section at ``section`` (a path of keys) may hold: those of the default
    config there, and of every member of its family (``task``, ``engine``)."""
    node: Any = RunConfig().model_dump(by_alias=True)
    for part in section:
        node = node.get(part) if isinstance(node, dict) else None
    keys = set(node) if isinstance(node, dict) else set()
    if len(section) == 1 and section[0] in FAMILIES:
        keys |= {k for n in names(section[0]) for k in member_of(section[0], n).model_fields}
    return keys


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(e["loc"][-1]), known_keys(e["loc"][:-1]), 1)
            msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
        lines.append(f"  {key}: {msg}" if key else f"  {msg}")
    return "invalid config:\n" + "\n".join(lines)


def apply_override(tree: dict[str, Any], assignment: str) -> str:
    """Set ``a.b.c=value`` in ``tree`` and return the key it set (``a.b.c``); ``value`` is
    parsed as YAML (``1e-3``, ``[+, -]``, ``null``). A null section on the way (``task.data:
    null``) becomes one holding the key."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like dotted.key=value")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {assignment!r} has an empty key part")
    node = tree
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        child = node[p]
        if not isinstance(child, dict):
            raise ConfigError(f"override {assignment!r}: {p!r} is not a section")
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {assignment!r}: cannot parse value: {e}") from e
    return ".".join(parts)


MODEL_SOURCES = ("path", "preset")  # the model section's two sources: one replaces the other


def replace_model_source(tree: dict[str, Any], overridden: set[str]) -> None:
    """An override that names the model's source (``model.path`` or ``model.preset``, not
    null) replaces the other one ``tree`` gave, unless that one is overridden too:
    ``model.path=DIR`` on a config with ``preset: micro`` trains the model in ``DIR``."""
    model = tree.get("model")
    if not isinstance(model, dict):
        return
    for source, other in (MODEL_SOURCES, MODEL_SOURCES[::-1]):
        if f"model.{source}" in overridden and model.get(source) is not None \
                and f"model.{other}" not in overridden:
            model[other] = None


def build_config(tree: dict[str, Any], overrides: Sequence[str] = ()) -> RunConfig:
    """``tree`` with ``overrides`` applied (to a copy: ``tree`` is left as it was;
    ``replace_model_source``), validated."""
    tree = copy.deepcopy(tree)
    overridden = set()
    for o in overrides:
        overridden.add(apply_override(tree, o))
    replace_model_source(tree, overridden)
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format(e)) from None


def read_tree(path: str | Path | None) -> dict[str, Any]:
    """The YAML mapping at ``path`` (``None``: an empty one), or a ``ConfigError``."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        tree = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(tree, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections")
    return tree


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """The config at ``path`` (``None``: the quickstart defaults) with ``overrides`` applied."""
    return build_config(read_tree(path), overrides)
