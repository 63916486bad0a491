"""The run's torch engine drafts with an MTP head (``engine.draft_tokens``;
``engines.speculative``): from the head beside the run's starting model, and every evaluation
reports the acceptance of its drafts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def starting_head(cfg, start_dir: Path) -> dict[str, Any]:
    """A speculative engine drafts with the head beside the run's starting model
    (``start_dir``) all run, resumed too, so a resumed run samples what the straight run
    did: the torch member's ``draft_dir`` (nothing when the engine does not draft)."""
    return {"draft_dir": start_dir} if getattr(cfg.engine, "draft_tokens", 0) else {}


def acceptance(engine) -> Callable[[], dict[str, float]] | None:
    """The acceptance of the drafts an in-process ``TorchEngine`` makes from now on
    (``SpeculativeStats.metrics_since``: ``spec/acceptance`` and the like; none when it
    drafted nothing); None for an engine that counts none."""
    counts = getattr(engine, "speculative", None)
    if counts is None:
        return None
    before = counts.snapshot()
    return lambda: counts.metrics_since(before)
