"""Where a dataset's rows are: a data file (JSON Lines, JSON, parquet, CSV, arrow; each may be
compressed: ``.gz``, ``.bz2``, ``.xz``, ``.zst``), several of one format (a list, or a glob
pattern such as ``data/part-*.jsonl.gz``), a ``save_to_disk`` directory or a folder
``datasets`` reads. ``DataSource`` says which, and why not when it is none of them."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

# file suffix -> the ``datasets`` builder that reads it
FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv",
                ".arrow": "arrow"}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
HUB_HINT = ("a Hugging Face hub dataset is read from a local copy: download it first "
            "(`hf download {name} --repo-type dataset --local-dir data/{leaf}`) and give "
            "that folder or its files")


def file_format(path: str | Path) -> str | None:
    """The ``datasets`` builder of a data file by its suffix (compression aside), or None."""
    suffixes = Path(path).suffixes
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return FILE_FORMATS.get(suffixes[-1]) if suffixes else None


@dataclass(frozen=True)
class DataSource:
    """``files`` (data files of one ``format``) or ``folder`` (a dataset directory)."""

    files: tuple[str, ...] = ()
    format: str | None = None
    folder: str | None = None

    @property
    def first(self) -> Path:
        return Path(self.folder or self.files[0])


def resolve(where: str | Path | list[str]) -> DataSource:
    """The ``DataSource`` at ``where``; ``ValueError`` says what is missing or unreadable."""
    names = [str(where)] if isinstance(where, str | Path) else [str(w) for w in where]
    if not names:
        raise ValueError("names no data file")
    files: list[str] = []
    for name in names:
        found = sorted(glob.glob(name)) if glob.has_magic(name) else [name]
        if not found or not Path(found[0]).exists():
            hub = "/" in name and not Path(name).suffix and not name.startswith((".", "/"))
            hint = f"; {HUB_HINT.format(name=name, leaf=name.split('/')[-1])}" if hub else ""
            seen = "" if Path(name).is_absolute() else f" (looked for from {Path.cwd()})"
            raise ValueError(f"{name!r} does not exist{seen}{hint}" if not glob.has_magic(name)
                             else f"{name!r} matches no file{seen}")
        files += found
    if len(files) == 1 and Path(files[0]).is_dir():
        return DataSource(folder=files[0])
    formats = {f: file_format(f) for f in files}
    bad = [f for f, fmt in formats.items() if fmt is None or Path(f).is_dir()]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a data file ({', '.join(FILE_FORMATS)}, each may "
                         f"be {'/'.join(COMPRESSIONS)}-compressed) or a dataset folder")
    if len(set(formats.values())) > 1:
        raise ValueError(f"the data files mix formats ({', '.join(sorted(set(formats.values())))}"
                         "): give files of one format")
    return DataSource(tuple(files), formats[files[0]])
