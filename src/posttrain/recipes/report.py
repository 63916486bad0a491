"""Where a run's numbers go: ``metrics.jsonl``, a rich progress bar, and ``curves.png``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class Reporter:
    """Appends ``{"stage", "step", ...metrics}`` lines to ``metrics.jsonl`` and shows progress."""

    def __init__(self, out_dir: str | Path, console: Console | None = None, quiet: bool = False):
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self._progress: Progress | None = None
        self._task = None

    def log(self, stage: str, step: int, metrics: dict[str, Any]) -> None:
        row = {"stage": stage, "step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def message(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text)

    def start(self, description: str, total: int) -> None:
        self.finish()
        if self.quiet:
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

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line]
    sft = [r for r in rows if r["stage"] == "sft"]
    rl = [r for r in rows if r["stage"] == "rl"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in sft], [r["loss"] for r in sft], color="tab:blue")
    ax1.set(title="SFT", xlabel="step", ylabel="loss (assistant tokens)")
    ax2.plot([r["step"] for r in rl], [r["reward"] for r in rl], label="reward (train)")
    ax2.plot([r["step"] for r in rl], [r["accuracy"] for r in rl], label="accuracy (train)")
    ev = [r for r in rl if "eval/accuracy" in r]
    ax2.plot([r["step"] for r in ev], [r["eval/accuracy"] for r in ev], "o-",
             label="accuracy (held-out)")
    ax2.set(title="RL", xlabel="step", ylim=(0, 1.15))
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
