"""Where a stage's rows come from: local data read through Hugging Face ``datasets``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from posttrain.config.section import Section
from posttrain.config.sections.data_columns import local_columns
from posttrain.config.sections.data_files import resolve


class DatasetConfig(Section):
    """Rows of local data, read with Hugging Face ``datasets``. ``path``: a JSONL, JSON,
    parquet, CSV or arrow file (compressed or not; its rows are the split ``train``), several
    of one format (a list, or a glob pattern), a ``save_to_disk`` directory, or a folder
    ``load_dataset`` reads (data files, or a loading script); ``split`` of it (``data_files``).
    ``where``: only the rows whose column ``c`` holds ``where[c]`` (one value, or any of a
    list), the others left out (not counted as malformed). Held out for evaluation: the split
    ``eval_split`` of the same data, or the file or folder ``eval_path``, else the last
    ``task.eval_fraction`` of the rows. ``shuffle``: rows in an order drawn from the run's
    seed first; ``max_rows``: only the first that many.

    ``streaming``: the train split is read as a stream (``datasets``' ``IterableDataset``),
    never whole: prompts come in the stream's order through a buffer of ``shuffle_buffer``
    rows shuffled from the run's seed, a new epoch (a new order) when the data runs out;
    ``max_rows`` then keeps the first that many usable rows of the data, in file order. The
    held-out rows are the first ones of ``eval_split`` or ``eval_path``, one of which is
    needed (a held-out fraction needs the row count).

    Columns: ``prompt`` (a string, or chat messages ``[{"role", "content"}, ...]``),
    ``answer`` (the reference the verifiers check; a number becomes its text; null: no
    reference), ``system`` (a column of system prompts) or ``system_prompt`` (one text for every
    row; a row's own system message wins over both). Every column of a row reaches reward
    functions that ask for it."""

    path: str | list[str] = Field(
        description="a data file, several (a list or a glob), a save_to_disk directory or a folder")
    split: str = Field("train", description="the split of path to train on")
    eval_path: str | list[str] | None = Field(
        None,
        description="a held-out file or folder (null: eval_split, else the last "
                    "task.eval_fraction)")
    eval_split: str | None = Field(
        None,
        description="a held-out split of path (null: eval_path, else the last task.eval_fraction)")
    prompt: str = Field("prompt", description="the prompt column: a string or chat messages")
    answer: str | None = Field(
        "answer", description="the reference column the verifiers check (null: no reference)")
    system: str | None = Field(None, description="a column of system prompts (null: none)")
    system_prompt: str | None = Field(None,
                                      description="one system prompt for every row (null: none)")
    shuffle: bool = Field(True, description="rows in an order drawn from the run's seed")
    max_rows: int | None = Field(None, ge=1,
                                 description="only the first that many rows (null: all)")
    streaming: bool = Field(False, description="read the train split as a stream, never whole")
    shuffle_buffer: int = Field(10_000, ge=1, description="rows of the streaming shuffle buffer")
    where: dict[str, Any] | None = Field(
        None,
        description="keep only rows whose column c holds where[c] (a value, or any of a list)")

    def keeps(self, row: dict) -> bool:
        """Whether ``where`` keeps ``row``."""
        return all(row.get(c) in (v if isinstance(v, list) else [v])
                   for c, v in (self.where or {}).items())

    def columns(self) -> dict[str, str | None]:
        """The column each role reads (``prompt``, ``answer``, ``system``; None: not read)."""
        return {"prompt": self.prompt, "answer": self.answer, "system": self.system}

    def known_columns(self) -> list[str] | None:
        """The train rows' columns where their head tells them (``data_columns``)."""
        return local_columns(self.path, self.split)

    def _has_columns(self) -> None:
        sources = [("path", self.path, self.split)]
        if self.eval_path is not None:
            sources.append(("eval_path", self.eval_path, "train"))
        elif self.eval_split is not None:
            sources.append(("path", self.path, self.eval_split))
        for key, where, split in sources:
            have = local_columns(where, split)
            if have is None:
                continue
            roles = {**self.columns(), **{"where": c for c in self.where or {}}}
            for role, column in roles.items():
                if column is not None and column not in have:
                    raise ValueError(f"{key} {where!r} has no column {column!r} (the {role} "
                                     f"column: task.data.{role}); its columns: {', '.join(have)}")

    @model_validator(mode="after")
    def _readable(self) -> DatasetConfig:
        for key in ("path", "eval_path"):
            if getattr(self, key) is not None:
                try:
                    resolve(getattr(self, key))
                except ValueError as e:
                    raise ValueError(f"{key}: {e}") from None
        if self.eval_path is not None and self.eval_split is not None:
            raise ValueError("eval_path and eval_split both name the held-out rows: set one")
        self._has_columns()
        if self.system is not None and self.system_prompt is not None:
            raise ValueError("system (a column) and system_prompt (one text) both give the "
                             "system prompt: set one")
        if self.streaming and self.eval_path is None and self.eval_split is None:
            raise ValueError("streaming needs eval_split or eval_path for the held-out rows "
                             "(holding out a fraction of the rows needs their count, which a "
                             "stream does not know)")
        if self.shuffle_buffer != type(self).model_fields["shuffle_buffer"].default and not (
                self.streaming and self.shuffle):
            raise ValueError("shuffle_buffer is set but cannot take effect: only a stream "
                             "(streaming: true) that is shuffled (shuffle: true) has a buffer")
        return self
