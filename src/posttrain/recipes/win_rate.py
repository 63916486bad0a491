"""The reward-model win-rate monitor (CharacterFlywheel, arXiv 2603.01973): at every
evaluation of an RL run, how often its reward model or judge scores the policy's response to a
held-out prompt above the reference model's (the RL stage's starting policy) — over-optimising
a learned reward shows as a rate running away from 0.5 (CharacterFlywheel warns above 0.65)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from posttrain.algos import get
from posttrain.types import Episode
from posttrain.types.jsonl import write_atomic


class WinRateMonitor:
    """Scores of ``part`` on the evaluation's episodes against the reference's, episode by
    episode (the same held-out tasks and samples, in order). The reference's scores are kept
    in ``path`` (a resumed run reads them back); a rate above ``warn_above`` is passed to
    ``warn``."""

    def __init__(self, part: str, warn_above: float, path: Path,
                 warn: Callable[[str], None]) -> None:
        self.part, self.warn_above, self.path, self.warn = part, warn_above, Path(path), warn
        self.reference: list[float] | None = None
        if self.path.exists():
            saved = json.loads(self.path.read_text())
            if saved["part"] != part:
                raise ValueError(f"{self.path} holds the reference's scores under "
                                 f"{saved['part']!r}, not {part!r}: resume with the same "
                                 "rl.rm_win_rate_monitor.part")
            self.reference = saved["scores"]

    def scores(self, episodes: Sequence[Episode]) -> list[float]:
        return [e.rewards[self.part] for e in episodes]

    def set_reference(self, episodes: Sequence[Episode]) -> None:
        self.reference = self.scores(episodes)
        write_atomic(self.path, json.dumps({"part": self.part, "scores": self.reference}))

    def __call__(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """``{"rm_win_rate": rate}`` of ``episodes`` (an evaluation's) over the reference."""
        if self.reference is None:
            raise RuntimeError("the win-rate monitor has no reference scores yet")
        if len(episodes) != len(self.reference):
            raise ValueError(f"the evaluation has {len(episodes)} episodes and the reference "
                             f"{len(self.reference)} scores ({self.path}): the monitor compares "
                             "the same held-out tasks and samples")
        rate = get("metric", "rm_win_rate")(policy_scores=self.scores(episodes),
                                            reference_scores=self.reference)
        if rate > self.warn_above:
            self.warn(f"[yellow]rm_win_rate {rate:.3f} > {self.warn_above}: the policy beats "
                      f"the reference under {self.part!r} too often; it may be exploiting the "
                      "reward model")
        return {"rm_win_rate": rate}
