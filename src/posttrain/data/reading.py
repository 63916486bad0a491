"""Reading local datasets with Hugging Face ``datasets``: a data file, a ``save_to_disk``
directory or a dataset folder, one split of it. Whatever stops the read is a ``DataError``
naming the path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from posttrain.settings.data_config import FILE_FORMATS
from posttrain.types.errors import DataError

SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")  # save_to_disk's
T = TypeVar("T")


def read_dataset(path: str | Path, split: str = "train", what: str = "dataset"):
    """Split ``split`` of the data at ``path`` as a ``datasets.Dataset`` (memory-mapped, not
    loaded). A data file holds one split, ``train``. An unreadable file, an unknown split or
    no row at all raises ``DataError`` naming ``what`` and the path."""
    import datasets

    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} {str(p)!r} does not exist")
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its traceback: ours is a line
    try:
        if p.is_dir() and any((p / m).is_file() for m in SAVED_MARKERS):
            rows = datasets.load_from_disk(str(p))
        elif p.is_dir():
            rows = datasets.load_dataset(str(p))
        elif p.suffix in FILE_FORMATS:
            rows = datasets.load_dataset(FILE_FORMATS[p.suffix], data_files=str(p))
        else:
            raise DataError(f"{what} {str(p)!r}: not a data file ({', '.join(FILE_FORMATS)}) "
                            "or a dataset folder")
    except DataError:
        raise
    except Exception as e:  # the root cause (pyarrow's parse error names the row)
        raise DataError(f"cannot read {what} {str(p)!r}: {root_cause(e)}") from e
    finally:
        datasets.logging.set_verbosity(verbosity)
    if isinstance(rows, datasets.DatasetDict):
        if split not in rows:
            raise DataError(f"{what} {str(p)!r} has no split {split!r}; it has: "
                            f"{', '.join(rows)}")
        rows = rows[split]
    if len(rows) == 0:
        raise DataError(f"{what} {str(p)!r} (split {split!r}) has no rows")
    return rows


def read_rows(path: str | Path, parse: Callable[[dict], T], what: str, split: str = "train",
              columns: dict[str, str | None] | None = None
              ) -> tuple[list[T], list[tuple[int, str]]]:
    """``parse`` of every row of split ``split`` of ``path``, which must have the ``columns``
    (see ``require_columns``); a row ``parse`` rejects (``ValueError``) is skipped, its index
    and the reason kept. No usable row raises ``DataError`` with the first reason."""
    rows = read_dataset(path, split, what)
    require_columns(rows, path, columns or {}, what)
    items, skipped = [], []
    for i, row in enumerate(rows):
        try:
            items.append(parse(row))
        except ValueError as e:
            skipped.append((i, str(e)))
    if not items:
        i, why = skipped[0]
        raise DataError(f"{what} {str(path)!r} holds no usable row ({len(skipped)} skipped; "
                        f"row {i}: {why})")
    return items, skipped


def root_cause(error: BaseException) -> str:
    """The message of the exception at the bottom of ``error``'s ``raise ... from`` chain,
    on one line."""
    while error.__cause__ is not None:
        error = error.__cause__
    return " ".join(str(error).split()) or type(error).__name__


def require_columns(rows, path: str | Path, wanted: dict[str, str | None],
                    what: str = "dataset") -> None:
    """Every column ``wanted`` names (``role -> column``; None: not used) is in ``rows``."""
    missing = {role: col for role, col in wanted.items()
               if col is not None and col not in rows.column_names}
    if missing:
        said = ", ".join(f"{col!r} (the {role} column)" for role, col in missing.items())
        raise DataError(f"{what} {str(path)!r} has no column {said}; its columns: "
                        f"{', '.join(rows.column_names)}")
