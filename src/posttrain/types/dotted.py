"""Objects named by dotted path: ``package.module:attr`` (an importable module) or
``path/to/file.py:attr`` (a file, relative to the working directory). Config names a user's
code this way (``posttrain.config.extension`` checks each kind's calling contract), and so
does the algorithm catalogue (``posttrain.algos.entry(kind, "my_pkg.mod:fn")``)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any


class ExtensionError(ValueError):
    """A dotted path that does not load, or loads something of the wrong shape."""


def is_path(value: str) -> bool:
    """Whether a config value names an extension rather than a built-in."""
    return ":" in value


FILE_MODULE = "posttrain_ext_"  # the name prefix of a module loaded from a file


def _module_of_file(path: Path):
    """The module at ``path``, loaded once per resolved path."""
    resolved = path.resolve()
    name = f"{FILE_MODULE}{hashlib.sha1(str(resolved).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_module(where: str, spec: str):
    """The module ``where`` (``path/to/file.py`` or an importable name); errors name ``spec``."""
    from_file = where.endswith(".py")
    if from_file and not Path(where).is_file():
        raise ExtensionError(f"{spec!r}: no file {where!r} (a file is found from the working "
                             f"directory, {Path.cwd()}, not from the config's folder)")
    try:
        return _module_of_file(Path(where)) if from_file else importlib.import_module(where)
    except Exception as e:  # the user's module failed to import: say why
        raise ExtensionError(f"{spec!r}: cannot import {where!r}: {type(e).__name__}: {e}") from e


def load_object(spec: str) -> Any:
    """The object ``spec`` names; an ``ExtensionError`` says which part failed."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ExtensionError(f"{spec!r} is not a dotted path: use package.module:name or "
                             "path/to/file.py:name")
    obj = load_module(where, spec)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExtensionError(f"{spec!r}: {where!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
