"""Reading local datasets with Hugging Face ``datasets``: data files (``data_files``: one, a
list or a glob, compressed or not), a ``save_to_disk`` directory or a dataset folder, one split
of it, whole (memory-mapped) or as a stream. Whatever stops the read is a ``DataError`` naming
the path."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from posttrain.config.sections.data_columns import open_text
from posttrain.config.sections.data_files import file_format, resolve
from posttrain.types.errors import DataError

SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")  # save_to_disk's
T = TypeVar("T")


Where = str | Path | list[str]


def read_dataset(path: Where, split: str = "train", what: str = "dataset"):
    """Split ``split`` of the data at ``path`` as a ``datasets.Dataset`` (memory-mapped, not
    loaded). Data files hold one split, ``train``. An unreadable file, an unknown split or
    no row at all raises ``DataError`` naming ``what`` and the path."""
    rows = _split(_load(path, what, streaming=False), path, split, what)
    if len(rows) == 0:
        raise DataError(f"{what} {_named(path)} (split {split!r}) has no rows")
    return rows


def _named(path: Where) -> str:
    return repr(str(path)) if not isinstance(path, list) else repr(path)


def _load(path: Where, what: str, streaming: bool):
    """What ``datasets`` reads at ``path``: a ``save_to_disk`` directory (always whole: it is
    memory-mapped), else a folder or data files, as streams with ``streaming``."""
    import datasets

    try:
        source = resolve(path)
    except ValueError as e:
        raise DataError(f"{what} {e}") from None
    p = source.first
    try:
        with quiet_datasets(), progress_bars_off():
            if source.folder is not None and any((p / m).is_file() for m in SAVED_MARKERS):
                return datasets.load_from_disk(str(p))
            if source.folder is not None:
                return datasets.load_dataset(str(p), streaming=streaming)
            return datasets.load_dataset(source.format, data_files=list(source.files),
                                         streaming=streaming)
    except Exception as e:
        raise DataError(f"cannot read {what} {_named(path)}: {_why(p, e)}") from e


def _why(p: Path, error: BaseException) -> str:
    """Why ``datasets`` could not read ``p``: the root cause, an empty file said as such, and
    a JSON Lines file's first bad line found by reading it (pyarrow counts rows within a
    block of the file, so its "in row N" can name another row)."""
    cause = root_cause(error)
    if cause == "StopIteration":
        return "it holds no rows (the file is empty)"
    if file_format(p) == "json" and "JSON parse error" in cause:
        with open_text(p) as f:
            for number, line in enumerate(f, start=1):
                try:
                    if line.strip():
                        json.loads(line)
                except json.JSONDecodeError as e:
                    return (f"line {number:,} is not valid JSON ({e.msg}, column {e.colno}; "
                            f"row {number - 1:,} counting from 0)")
    return cause


def _split(rows, path: Where, split: str, what: str):
    """Split ``split`` of what ``_load`` read (data files' one split is ``train``)."""
    import datasets

    if isinstance(rows, datasets.DatasetDict | datasets.IterableDatasetDict):
        if split not in rows:
            raise DataError(f"{what} {_named(path)} has no split {split!r}; it has: "
                            f"{', '.join(rows)}")
        rows = rows[split]
    return rows


def read_rows(path: Where, parse: Callable[[dict], T], what: str, split: str = "train",
              columns: dict[str, str | None] | None = None,
              keep: Callable[[dict], bool] | None = None
              ) -> tuple[list[T], list[tuple[int, str]]]:
    """``parse`` of every row of split ``split`` of ``path`` that ``keep`` keeps (a filter:
    the others are left out), which must have the ``columns`` (see ``require_columns``); a row
    ``parse`` rejects (``ValueError``) is skipped, its index (counting every row from 0) and
    the reason kept. No usable row raises ``DataError`` with the first reason."""
    rows = read_dataset(path, split, what)
    require_columns(rows, path, columns or {}, what)
    items, skipped = [], []
    for i, row in enumerate(rows):
        if keep is not None and not keep(row):
            continue
        try:
            items.append(parse(row))
        except ValueError as e:
            skipped.append((i, str(e)))
    if not items:
        raise no_usable_row(what, path, skipped)
    return items, skipped


def no_usable_row(what: str, path: Where, skipped: list[tuple[int, str]]) -> DataError:
    """The error of data whose every row was skipped (or left out by a filter): how many,
    and the first's reason."""
    if not skipped:
        return DataError(f"{what} {_named(path)}: task.data.where leaves no row")
    i, why = skipped[0]
    return DataError(f"{what} {_named(path)} holds no usable row ({len(skipped)} skipped; "
                     f"row {i}, counting from 0: {why})")


def stream_dataset(path: Where, split: str = "train", what: str = "dataset"):
    """Split ``split`` of the data at ``path`` as a ``datasets.IterableDataset``: rows are read
    as they are iterated, never loaded or cached whole. A ``save_to_disk`` directory is
    memory-mapped Arrow already: its rows are iterated in place (``to_iterable_dataset``).
    Raises ``DataError`` as ``read_dataset`` does; a read error met while iterating is a
    ``DataError`` too (see ``stream_rows``)."""
    import datasets

    rows = _split(_load(path, what, streaming=True), path, split, what)
    return rows.to_iterable_dataset() if isinstance(rows, datasets.Dataset) else rows


def stream_rows(rows, path: Where, split: str = "train", what: str = "dataset"
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
                raise DataError(f"{what} {_named(path)} (split {split!r}) has no rows") from None
            return
        except Exception as e:
            raise DataError(f"cannot read {what} {_named(path)}: {root_cause(e)}") from e
        yield index, row
        index += 1


@contextlib.contextmanager
def progress_bars_off():
    """No "Generating train split" bars from ``datasets`` meanwhile (the run has its own)."""
    import datasets

    shown = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            datasets.utils.logging.enable_progress_bar()


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


def require_columns(rows, path: Where, wanted: dict[str, str | None],
                    what: str = "dataset", columns: list[str] | None = None) -> None:
    """Every column ``wanted`` names (``role -> column``; None: not used) is in ``rows``
    (or in ``columns``, given: a stream's first row's keys)."""
    columns = rows.column_names if columns is None else columns
    missing = {role: col for role, col in wanted.items()
               if col is not None and col not in columns}
    if missing:
        said = ", ".join(f"{col!r} (the {role} column)" for role, col in missing.items())
        raise DataError(f"{what} {_named(path)} has no column {said}; its columns: "
                        f"{', '.join(columns)}")
