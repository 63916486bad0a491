"""Reading local datasets with Hugging Face ``datasets``: a data file, a ``save_to_disk``
directory or a dataset folder, one split of it, whole (memory-mapped) or as a stream.
Whatever stops the read is a ``DataError`` naming the path."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
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
    p = Path(path)
    rows = _split(_load(p, what, streaming=False), p, split, what)
    if len(rows) == 0:
        raise DataError(f"{what} {str(p)!r} (split {split!r}) has no rows")
    return rows


def _load(p: Path, what: str, streaming: bool):
    """What ``datasets`` reads at ``p``: a ``save_to_disk`` directory (always whole: it is
    memory-mapped), else a folder or a data file, as streams with ``streaming``."""
    import datasets

    if not p.exists():
        raise DataError(f"{what} {str(p)!r} does not exist")
    try:
        with quiet_datasets():
            if p.is_dir() and any((p / m).is_file() for m in SAVED_MARKERS):
                return datasets.load_from_disk(str(p))
            if p.is_dir():
                return datasets.load_dataset(str(p), streaming=streaming)
            if p.suffix in FILE_FORMATS:
                return datasets.load_dataset(FILE_FORMATS[p.suffix], data_files=str(p),
                                             streaming=streaming)
            raise DataError(f"{what} {str(p)!r}: not a data file ({', '.join(FILE_FORMATS)}) "
                            "or a dataset folder")
    except DataError:
        raise
    except Exception as e:  # the root cause (pyarrow's parse error names the row)
        raise DataError(f"cannot read {what} {str(p)!r}: {root_cause(e)}") from e


def _split(rows, p: Path, split: str, what: str):
    """Split ``split`` of what ``_load`` read (a data file's one split is ``train``)."""
    import datasets

    if isinstance(rows, datasets.DatasetDict | datasets.IterableDatasetDict):
        if split not in rows:
            raise DataError(f"{what} {str(p)!r} has no split {split!r}; it has: "
                            f"{', '.join(rows)}")
        rows = rows[split]
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
        raise no_usable_row(what, path, skipped)
    return items, skipped


def no_usable_row(what: str, path: str | Path, skipped: list[tuple[int, str]]) -> DataError:
    """The error of data whose every row was skipped: how many, and the first's reason."""
    i, why = skipped[0]
    return DataError(f"{what} {str(path)!r} holds no usable row ({len(skipped)} skipped; "
                     f"row {i}: {why})")


def stream_dataset(path: str | Path, split: str = "train", what: str = "dataset"):
    """Split ``split`` of the data at ``path`` as a ``datasets.IterableDataset``: rows are read
    as they are iterated, never loaded or cached whole. A ``save_to_disk`` directory is
    memory-mapped Arrow already: its rows are iterated in place (``to_iterable_dataset``).
    Raises ``DataError`` as ``read_dataset`` does; a read error met while iterating is a
    ``DataError`` too (see ``stream_rows``)."""
    import datasets

    p = Path(path)
    try:
        rows = _split(_load(p, what, streaming=True), p, split, what)
    except DataError as e:
        if not isinstance(e.__cause__, StopIteration):
            raise
        # what a stream reads first, to learn the columns, was not there
        raise DataError(f"{what} {str(p)!r} (split {split!r}) has no rows") from None
    return rows.to_iterable_dataset() if isinstance(rows, datasets.Dataset) else rows


def stream_rows(rows, path: str | Path, split: str = "train", what: str = "dataset"
                ) -> Iterator[tuple[int, dict]]:
    """``(index, row)`` for every row of the stream ``rows`` (of split ``split`` of
    ``path``), from the first; a read error met on the way (a broken line far into a file)
    raises ``DataError`` naming the path, and so does a stream without any row."""
    it = iter(rows)
    index = 0
    while True:
        try:
            with quiet_datasets():
                row = next(it)
        except StopIteration:
            if index == 0:
                raise DataError(f"{what} {str(path)!r} (split {split!r}) has no rows") from None
            return
        except Exception as e:
            raise DataError(f"cannot read {what} {str(path)!r}: {root_cause(e)}") from e
        yield index, row
        index += 1


@contextlib.contextmanager
def quiet_datasets():
    """``datasets`` logs only what is critical meanwhile (its traceback: ours is a line)."""
    import datasets

    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)


def root_cause(error: BaseException) -> str:
    """The message of the exception at the bottom of ``error``'s ``raise ... from`` chain,
    on one line."""
    while error.__cause__ is not None:
        error = error.__cause__
    return " ".join(str(error).split()) or type(error).__name__


def require_columns(rows, path: str | Path, wanted: dict[str, str | None],
                    what: str = "dataset", columns: list[str] | None = None) -> None:
    """Every column ``wanted`` names (``role -> column``; None: not used) is in ``rows``
    (or in ``columns``, given: a stream's first row's keys)."""
    columns = rows.column_names if columns is None else columns
    missing = {role: col for role, col in wanted.items()
               if col is not None and col not in columns}
    if missing:
        said = ", ".join(f"{col!r} (the {role} column)" for role, col in missing.items())
        raise DataError(f"{what} {str(path)!r} has no column {said}; its columns: "
                        f"{', '.join(columns)}")
