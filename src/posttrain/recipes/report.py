"""Where a run's numbers go: ``metrics.jsonl`` (and the ``report_to`` trackers), progress (a
rich bar, or lines without a terminal), and ``curves.png``."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from posttrain.recipes.tracking import Tracker, sample_rows
from posttrain.types import Episode


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


@dataclass
class _Lines:
    """Progress without a terminal: what is counted, and when the count started and was last
    printed."""

    description: str
    total: int
    started: float
    printed: float


class StepProgress:
    """Progress of a loop of ``total`` steps: a rich progress bar on a terminal; elsewhere (a
    log file, a pipe, CI) a line at the start, every ``every_s`` seconds and at the end."""

    def __init__(self, console: Console | None = None, quiet: bool = False,
                 every_s: float = 30.0):
        self.console = console or Console(stderr=True)
        self.quiet, self.every_s = quiet, every_s
        self._progress: Progress | None = None
        self._task = None
        self._lines: _Lines | None = None

    def message(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text)

    def start(self, description: str, total: int) -> None:
        self.finish()
        if self.quiet:
            return
        if not self.console.is_terminal:
            now = time.monotonic()
            self._lines = _Lines(description, total, now, now)
            self.console.print(f"{description}: 0/{total}", highlight=False)
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(description, total=total, info="")

    def advance(self, completed: int, info: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, info=info)
        elif self._lines is not None:
            lines, now = self._lines, time.monotonic()
            if completed >= lines.total or now - lines.printed >= self.every_s:
                lines.printed = now
                self.console.print(f"{lines.description}: {completed}/{lines.total} "
                                   f"({now - lines.started:.0f} s) {info}".rstrip(),
                                   highlight=False)

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._lines = None


class Reporter(StepProgress):
    """``StepProgress`` that also appends ``{"stage", "step", ...metrics}`` lines to
    ``<out_dir>/metrics.jsonl`` and hands them, and held-out samples, to ``trackers``
    (``recipes.tracking``; ``close`` ends them)."""

    def __init__(self, out_dir: str | Path, console: Console | None = None, quiet: bool = False,
                 every_s: float = 30.0, trackers: Sequence[Tracker] = ()):
        super().__init__(console, quiet, every_s)
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.trackers = list(trackers)

    def log(self, stage: str, step: int, metrics: dict[str, Any]) -> None:
        row = {"stage": stage, "step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
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


SAMPLED = ("rl", "opd")  # stages that log reward and accuracy of their own samples
YLABEL = {"sft": "loss (assistant tokens)", "pref": "loss", "distill": "divergence",
          "rl": "reward / accuracy", "opd": "reward / accuracy"}


def curve_panels(rows: list[dict], evals: dict, stages: list[str]) -> list[dict]:
    """One panel a stage that logged rows (in the run's order): ``title``, ``ylabel`` and
    ``series`` ``(label, steps, values, style)``. A sampling stage's panel shows the train
    reward and accuracy and the held-out accuracy: where the stage started (after the previous
    stage, or before training), its in-loop evaluations and where it ended; the accuracy before
    any training is a dotted line."""
    panels = []
    for k, stage in enumerate(s for s in stages if any(r["stage"] == s for r in rows)):
        mine = [r for r in rows if r["stage"] == stage]
        steps = [r["step"] for r in mine]
        if stage not in SAMPLED:
            key = "loss" if "loss" in mine[0] else "divergence"
            series = [(key, steps, [r[key] for r in mine], "-")]
        else:
            series = [(f"{m} (train)", steps, [r[m] for r in mine], "-")
                      for m in ("reward", "accuracy")]
            i = stages.index(stage)
            start = evals.get(f"eval_after_{stages[i - 1]}" if i else "eval_before")
            end = evals.get(f"eval_after_{stage}")
            held = ([(0, start["accuracy"])] if start else []) + [
                (r["step"], r["eval/accuracy"]) for r in mine if "eval/accuracy" in r] + (
                [(steps[-1], end["accuracy"])] if end else [])
            if held:
                series.append(("accuracy (held-out)", [h[0] for h in held],
                               [h[1] for h in held], "o-"))
            if "eval_before" in evals and (i or k):
                before = evals["eval_before"]["accuracy"]
                series.append(("held-out before training", [0, steps[-1]], [before, before],
                               ":"))
        panels.append({"title": stage.upper(), "ylabel": YLABEL.get(stage, "value"),
                       "series": series})
    return panels


def plot_curves(metrics_path: str | Path, out_path: str | Path, evals: dict | None = None,
                stages: list[str] | None = None) -> Path:
    """``curve_panels`` of the run's ``metrics.jsonl`` as one PNG, the legends beside the
    axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line]
    order = stages or list(dict.fromkeys(r["stage"] for r in rows))
    panels = curve_panels(rows, evals or {}, order)
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(6.5 * max(len(panels), 1), 4),
                             squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, x, y, style in panel["series"]:
            ax.plot(x, y, style, label=label)
        ax.set(title=panel["title"], xlabel="step", ylabel=panel["ylabel"])
        if len(panel["series"]) > 1:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
