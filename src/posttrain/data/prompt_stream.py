"""Prompts from a dataset larger than memory (``task.data.streaming``): the train split is
read as a stream, epoch after epoch, through a seeded shuffle buffer; the step number is the
data cursor (``envs.seek_step``), so a resumed run draws what an uninterrupted one did."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from posttrain.config.sections.data import DatasetConfig
from posttrain.data.prompt_tasks import PromptTask, prompt_task
from posttrain.data.reading import no_usable_row, require_columns, stream_dataset, stream_rows
from posttrain.envs.base import SplitTasks


def buffer_shuffled(items: Iterable, rng: random.Random, size: int) -> Iterator:
    """``items`` through a shuffle buffer of ``size``: once it is full, each new item takes
    the place of one drawn from it at random; what is left at the end comes out shuffled.
    An item moves at most about ``size`` places earlier; later, any number."""
    buffer: list = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = rng.randrange(size)
        yield buffer[j]
        buffer[j] = item
    rng.shuffle(buffer)
    yield from buffer


class PromptStream:
    """The usable rows of a stream as an endless sequence of epochs. Epoch ``e`` holds the
    usable rows of the data (the first ``max_rows`` of them) in the order a buffer of
    ``buffer`` rows shuffled with ``Random(f"{seed}:data:train:{e}")`` gives (file order
    without ``shuffle``). ``position`` counts the prompts drawn over all epochs: ``take(n)``
    draws the next ``n``, ``seek(p)`` moves to ``p`` — forward by reading on, back within the
    rows of the last ``take`` for free, further back by reading the data again from the
    start (from the start of ``p``'s epoch once an epoch's length is known).

    ``open_rows()`` gives ``(index, row)`` of the data from its first row; ``parse`` makes a
    row's item or raises ``ValueError``: such a row is skipped, and ``skipped`` holds each
    skipped row's index and reason once, in file order, as reading finds them.
    ``on_first_pass(skipped)`` runs when reading first reaches the end of the data (or
    ``max_rows``)."""

    def __init__(self, open_rows: Callable[[], Iterator[tuple[int, dict]]],
                 parse: Callable[[dict], Any], seed: int = 0, shuffle: bool = True,
                 buffer: int = 10_000, max_rows: int | None = None, source: str = "",
                 what: str = "dataset") -> None:
        self.open_rows, self.parse = open_rows, parse
        self.seed, self.shuffle, self.buffer, self.max_rows = seed, shuffle, buffer, max_rows
        self.source, self.what = source, what
        self.skipped: list[tuple[int, str]] = []
        self.on_first_pass: Callable[[list[tuple[int, str]]], None] | None = None
        self.epoch_length: int | None = None  # usable rows an epoch, once one was read out
        self.rows_read = 0  # rows read from the data so far, usable or not
        self.position = 0
        self._checked = 0  # rows below this index were parsed once (their skips recorded)
        self._passed = False
        self._window: deque = deque()  # the items at positions base, base + 1, ...
        self._base = 0
        self._open_epoch(0)

    # -- drawing -----------------------------------------------------------------------------
    def take(self, n: int) -> list:
        """The ``n`` items from ``position`` on."""
        while self._base < self.position:  # what is behind is not asked again
            self._window.popleft()
            self._base += 1
        out = []
        for _ in range(n):
            k = self.position - self._base
            if k == len(self._window):
                self._window.append(self._pull())
            out.append(self._window[k])
            self.position += 1
        return out

    def seek(self, position: int) -> None:
        """Draw from ``position`` on."""
        if position < 0:
            raise ValueError(f"a stream position is >= 0, got {position}")
        head = self._base + len(self._window)
        if self._base <= position <= head:
            self.position = position
            return
        if position < self._base:  # read again from the start
            self._open_epoch(0)
            self._base = 0
        else:
            self._base = head
        self._window.clear()
        while self._base < position:
            length = self.epoch_length
            if length and position // length > self._epoch:  # open a later epoch at once
                self._open_epoch(position // length)
                self._base = self._epoch * length
                continue
            self._pull()
            self._base += 1
        self.position = position

    def first_usable(self) -> None:
        """Read up to the first usable row: a stream without any raises ``DataError`` now,
        not at the first draw."""
        for _ in self._usable():
            return

    # -- reading -----------------------------------------------------------------------------
    def _open_epoch(self, epoch: int) -> None:
        self._epoch, self._offset = epoch, 0
        items = self._usable()
        self._items = buffer_shuffled(items, random.Random(f"{self.seed}:data:train:{epoch}"),
                                      self.buffer) if self.shuffle else items

    def _pull(self):
        """The item after the last one pulled, across epochs."""
        while True:
            try:
                item = next(self._items)
            except StopIteration:
                if self.epoch_length is None:
                    self.epoch_length = self._offset
                self._open_epoch(self._epoch + 1)
                continue
            self._offset += 1
            return item

    def _usable(self) -> Iterator:
        """The items of the usable rows from the start of the data, the first ``max_rows``."""
        usable = 0
        for i, row in self.open_rows():
            self.rows_read += 1
            try:
                item = self.parse(row)
            except ValueError as e:
                if i >= self._checked:
                    self.skipped.append((i, str(e)))
                self._checked = max(self._checked, i + 1)
                continue
            self._checked = max(self._checked, i + 1)
            usable += 1
            yield item
            if usable == self.max_rows:
                break
        if not usable:
            raise no_usable_row(self.what, self.source, self.skipped)
        if not self._passed:
            self._passed = True
            if self.on_first_pass is not None:
                self.on_first_pass(self.skipped)


class StreamedDatasetTasks(SplitTasks):
    """The prompts of ``cfg``'s dataset (``cfg.streaming``) as a ``PromptStream`` (``stream``;
    ``sample`` draws its next prompts, ``seek`` moves it) and held-out rows read as they are
    asked for: the first usable rows of ``eval_split`` or ``eval_path``, in file order.
    ``rows`` is the train split's ``datasets.IterableDataset``. ``skipped`` maps each split to
    the skipped rows found so far (indices and reasons, as ``DatasetTasks`` has them).
    ``eval_fraction`` is not used (the held-out rows are named), as in ``DatasetTasks`` then."""

    def __init__(self, cfg: DatasetConfig, seed: int = 0, eval_fraction: float = 0.1) -> None:
        self.cfg = cfg  # with eval_split or eval_path (DatasetConfig sees to it)
        self.rows = stream_dataset(cfg.path, cfg.split)
        self.stream = PromptStream(lambda: self._checked_rows(self.rows, cfg.path, cfg.split),
                                   self._parse, seed, cfg.shuffle, cfg.shuffle_buffer,
                                   cfg.max_rows, cfg.path)
        source = cfg.eval_path if cfg.eval_path is not None else cfg.path
        self._eval_source = (source, cfg.eval_split or "train")
        self._eval_rows = self._checked_rows(stream_dataset(*self._eval_source),
                                             *self._eval_source)
        self._eval: list[PromptTask] = []
        self.splits = {"eval": self._eval}
        self.skipped = {"train": self.stream.skipped, "eval": []}
        self.stream.first_usable()

    @property
    def position(self) -> int:
        """How many train prompts were drawn before the next one (over all epochs)."""
        return self.stream.position

    def seek(self, position: int) -> None:
        """The next train prompt is the one at ``position``."""
        self.stream.seek(position)

    def sample(self, n: int, rng: random.Random, split: str = "train") -> list[PromptTask]:
        """The next ``n`` train prompts of the stream (its seeded order: ``rng`` is not
        used); of ``eval``, ``n`` drawn with replacement from the held-out rows read."""
        if split == "train":
            return self.stream.take(n)
        return super().sample(n, rng, split)

    def eval_set(self, n: int) -> list[PromptTask]:
        """The first ``n`` usable held-out rows (at most ``max_rows``), or all of them when
        the data holds fewer; only those are read."""
        n = min(n, self.cfg.max_rows or n)
        while len(self._eval) < n:
            try:
                i, row = next(self._eval_rows)
            except StopIteration:
                break
            try:
                self._eval.append(self._parse(row))
            except ValueError as e:
                self.skipped["eval"].append((i, str(e)))
        if not self._eval:
            raise no_usable_row("dataset", self._eval_source[0], self.skipped["eval"])
        return self._eval[:n]

    def _parse(self, row: dict) -> PromptTask:
        return prompt_task(row, self.cfg)

    def _checked_rows(self, rows, path: str | list[str], split: str
                      ) -> Iterator[tuple[int, dict]]:
        """``stream_rows`` whose first row has the columns ``cfg`` maps, and which its
        ``where`` keeps."""
        for i, row in stream_rows(rows, path, split):
            if i == 0:
                require_columns(rows, path, self.cfg.columns(), columns=list(row))
            if self.cfg.keeps(row):
                yield i, row
