"""The columns of local data, read from its head (a schema, a header, the first rows) without
loading it, so that a config naming a column the data lacks fails when it is validated, not
after the run has started. ``None`` where they cannot be known that cheaply (a dataset folder
of data files or a loading script, a JSON file that is one array): the read checks them then.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
from pathlib import Path

from posttrain.config.sections.data_files import COMPRESSIONS, resolve

HEAD_ROWS = 100  # JSON Lines: the union of the keys of this many first rows
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def open_text(path: Path):
    """``path`` opened as text, decompressed by its suffix (``OSError`` for ``.zst``, which
    the standard library cannot read)."""
    if path.suffix == ".zst":
        raise OSError("zstandard: not read here")
    opener = OPENERS.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8", errors="replace", newline="")


def local_columns(where: str | list[str], split: str = "train") -> list[str] | None:
    """The column names of split ``split`` of the data at ``where`` (its first file, of
    several), or None (see above)."""
    try:
        source = resolve(where)
        p = source.first
        if source.folder is not None:
            return _saved_columns(p, split)
        compressed = p.suffix in COMPRESSIONS
        if source.format in ("parquet", "arrow"):
            if compressed:
                return None
            return _arrow_columns(p) if source.format == "arrow" else _parquet_columns(p)
        with open_text(p) as f:
            if source.format == "csv":
                return next(csv.reader(f), None)
            return _json_lines_columns(f)
    except (OSError, ValueError, EOFError, UnicodeDecodeError):
        return None  # unreadable here: the read says why


def _parquet_columns(p: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(p).names)


def _json_lines_columns(f) -> list[str] | None:
    """The keys of the first ``HEAD_ROWS`` rows of the open JSON Lines file ``f``."""
    keys: dict[str, None] = {}
    for n, line in enumerate(f):
        if n >= HEAD_ROWS:
            break
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict):
            return None  # a JSON array (or worse): datasets reads it, not we
        keys |= dict.fromkeys(row)
    return list(keys) or None


def _arrow_columns(p: Path) -> list[str] | None:
    import pyarrow as pa

    for opener in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            with pa.memory_map(str(p)) as source:
                return list(opener(source).schema.names)
        except pa.ArrowInvalid:
            continue
    return None


def _saved_columns(p: Path, split: str) -> list[str] | None:
    """A ``save_to_disk`` directory's features (a ``DatasetDict``'s: its split's)."""
    if (p / "dataset_dict.json").is_file():
        p = p / split
    info = p / "dataset_info.json"
    if not info.is_file():
        return None
    features = json.loads(info.read_text()).get("features")
    return list(features) if isinstance(features, dict) else None
