"""What ``posttrain eval --out DIR`` writes: ``samples.jsonl`` (every sample with its prompt,
completion, rewards and missing parts) and ``summary.json`` (the metrics), each atomically.
``DIR`` is an evaluation's own folder: one that holds a training run is refused
(``run_in``), so an evaluation never replaces a run's ``summary.json``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from posttrain.cli.curate import write_rows
from posttrain.envs import Task
from posttrain.types import Episode, write_atomic


def sample_rows(episodes: Sequence[Episode], tasks: Sequence[Task], samples: int) -> Iterator[dict]:
    """One row a sample: problem ``k``'s samples are episodes ``[k n, (k+1) n)``."""
    for i, e in enumerate(episodes):
        task = tasks[i // samples]
        yield {"problem": i // samples, "sample": i % samples, "prompt": task.messages(),
               "completion": e.meta.get("completion", e.meta.get("final")),
               "reference": task.reference, "reward": e.reward, "rewards": e.rewards,
               "missing": e.meta.get("missing_reasons", {}),
               "finish_reason": e.finish_reason, "row": getattr(task, "row", {})}


RUN_MARKS = ("config.yaml", "metrics.jsonl", ".lock")  # what a training run's directory holds


def run_in(out: Path) -> str | None:
    """What in ``out`` shows it holds a training run (None: an evaluation may write there)."""
    return next((m for m in RUN_MARKS if (out / m).exists()), None)


def write_eval(out: Path, episodes: Sequence[Episode], tasks: Sequence[Task], samples: int,
               metrics: dict[str, float]) -> None:
    """``out/samples.jsonl`` and ``out/summary.json``."""
    write_rows(out / "samples.jsonl", sample_rows(episodes, tasks, samples), lambda row: True)
    write_atomic(out / "summary.json", json.dumps(metrics, indent=2, default=str) + "\n")
