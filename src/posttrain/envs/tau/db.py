"""Domain databases of the tau-bench environments: typed records (pydantic, every declared
field present, float fields as floats), loaded from the shipped data, deep-merged with a
task's initialisation data, and their canonical hash (hex SHA-256 of the sorted-key JSON)."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

DB = TypeVar("DB", bound="Record")


class Record(BaseModel):
    """A database record: declared fields only, all present in its canonical form."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def data_dir(domain: str) -> Path:
    """The shipped files of ``domain`` (MIT, tau2-bench; see data/README.md)."""
    return Path(str(resources.files("posttrain.envs.tau") / "data" / domain))


def load_db(model: type[DB], path: Path) -> DB:
    return model.model_validate(json.loads(path.read_text()))


def canonical(db: Record) -> dict[str, Any]:
    """The full record tree (optionals null, floats as floats, enums as their values)."""
    return db.model_dump(mode="python")


def db_hash(db: Record | None) -> str | None:
    """Hex SHA-256 of ``json.dumps(canonical, sort_keys=True, default=str)``; None without a db."""
    if db is None:
        return None
    text = json.dumps(canonical(db), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def deep_merge(base: Any, update: Any) -> Any:
    """Objects merge key by key, recursively; anything else (lists, scalars) is replaced."""
    if isinstance(base, dict) and isinstance(update, dict):
        return {**base, **{k: deep_merge(base.get(k), v) for k, v in update.items()}}
    return update


def merged(db: DB, data: dict | None) -> DB:
    """``db`` with ``data`` deep-merged into its canonical form, validated again."""
    return type(db).model_validate(deep_merge(canonical(db), data)) if data else db
