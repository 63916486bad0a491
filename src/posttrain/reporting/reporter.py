"""Where a run's numbers go as it runs: ``metrics.jsonl`` (and the ``report_to`` trackers), and
progress (a rich bar, or lines without a terminal)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from posttrain.reporting.tracking import Tracker, sample_rows
from posttrain.types import Episode

TIME = "time"  # a metrics row's wall clock (Unix seconds)


def _jsonable(v: Any) -> Any:
    return str(v) if isinstance(v, float) and not math.isfinite(v) else v


@dataclass
class _Lines:
    """Progress without a terminal: what is counted, and when the count started and was last
    printed."""

    description: str
    total: int
    started: float
    printed: float
    done_at_start: int = 0  # a resumed stage's steps, not timed here

    def eta(self, completed: int, now: float) -> str:
        """``, ETA 42 s``: the steps left at the pace of those done since the start ("" before
        the first one, and at the end)."""
        timed = completed - self.done_at_start
        if timed <= 0 or completed >= self.total:
            return ""
        return f", ETA {(now - self.started) / timed * (self.total - completed):.0f} s"


class StepProgress:
    """Progress of a loop of ``total`` steps: a rich progress bar on a terminal; elsewhere (a
    log file, a pipe, CI) a line at the start, every ``every_s`` seconds and at the end. Both
    show the time elapsed and, until the end, an estimate of the time left (ETA)."""

    def __init__(self, console: Console | None = None, quiet: bool = False, every_s: float = 30.0):
        self.console = console or Console(stderr=True)
        self.quiet, self.every_s = quiet, every_s
        self._progress: Progress | None = None
        self._task = None
        self._lines: _Lines | None = None

    def message(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text)

    def start(self, description: str, total: int, done: int = 0) -> None:
        """A bar of ``total`` steps, ``done`` of them already (a resumed stage's)."""
        self.finish()
        if self.quiet:
            return
        if not self.console.is_terminal:
            now = time.monotonic()
            self._lines = _Lines(description, total, now, now, done)
            self.console.print(f"{description}: {done}/{total}", highlight=False)
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"), console=self.console,
            transient=False)
        self._progress.start()
        self._task = self._progress.add_task(description, total=total, completed=done, info="")

    def advance(self, completed: int, info: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, info=info)
        elif self._lines is not None:
            lines, now = self._lines, time.monotonic()
            if completed >= lines.total or now - lines.printed >= self.every_s:
                lines.printed = now
                self.console.print(f"{lines.description}: {completed}/{lines.total} "
                                   f"({now - lines.started:.0f} s{lines.eta(completed, now)}) "
                                   f"{info}".rstrip(), highlight=False)

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._lines = None


class Reporter(StepProgress):
    """``StepProgress`` that also appends ``{"stage", "step", ...metrics}`` lines to
    ``<out_dir>/metrics.jsonl`` and hands them, and held-out samples, to ``trackers``
    (``reporting.tracking``; ``close`` ends them)."""

    def __init__(self, out_dir: str | Path, console: Console | None = None, quiet: bool = False,
                 every_s: float = 30.0, trackers: Sequence[Tracker] = ()):
        super().__init__(console, quiet, every_s)
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.trackers = list(trackers)

    def log(self, stage: str, step: int, metrics: dict[str, Any]) -> None:
        """A row of ``metrics.jsonl`` (with ``time``, the wall clock it was written at: the
        viewer's time axis; not a metric, not sent to the trackers) and the trackers'."""
        row = {"stage": stage, "step": step, **{k: _jsonable(v) for k, v in metrics.items()},
               TIME: round(time.time(), 3)}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        for tracker in self.trackers:
            tracker.log(stage, step, metrics)

    def samples(self, name: str, episodes: Sequence[Episode], tokenizer) -> None:
        """Held-out episodes as the trackers' table ``samples/<name>``."""
        if self.trackers:
            rows = sample_rows(episodes, tokenizer)
            for tracker in self.trackers:
                tracker.table(name, rows)

    def close(self) -> None:
        """End the trackers' runs."""
        self.finish()
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []
