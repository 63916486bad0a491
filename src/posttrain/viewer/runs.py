"""Reading run directories while they are written, without loading them whole.

``RunFiles`` follows one run: ``metrics.jsonl`` rows from any row on (read from the byte
where the last read stopped), and ``episodes.jsonl`` through an index of each line's byte
offset and a small summary (step, group, reward, finish reason, trained length, prompt
start), extended as the file grows; one episode is read from disk by its offset when asked
for. A line still being written (no newline yet) waits for the next read. Tokens are decoded
one by one with the run's tokenizer (its ``rl_model``, else the newest stage model, else
``base_model``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.types import Episode

MODEL_DIRS = ("rl_model", "opd_model", "pref_model", "distill_model", "sft_model", "base_model")
PROMPT_CHARS = 120
TASK_KEYS = ("task", "domain")  # where an episode's meta names its task family, if anywhere


@dataclass
class Tail:
    """The complete lines appended to a file since the last ``read``."""

    path: Path
    offset: int = 0

    def read(self) -> list[tuple[int, bytes]]:
        """``(byte offset, line)`` of every complete line past ``offset``."""
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        lines, at = [], self.offset
        for line in data[:end].splitlines(keepends=True):
            if line.strip():
                lines.append((at, line))
            at += len(line)
        self.offset += end
        return lines


@dataclass
class RunFiles:
    """One run directory, read incrementally (thread-safe)."""

    path: Path
    rows: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    _offsets: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _tokenizer: Any = None
    _prompts: dict[tuple[int, ...], str] = field(default_factory=dict)  # decoded, by ids

    def __post_init__(self) -> None:
        self._metrics = Tail(self.path / "metrics.jsonl")
        self._episodes = Tail(self.path / "episodes.jsonl")

    @property
    def name(self) -> str:
        return self.path.name

    def stages(self) -> list[str]:
        self.refresh()
        return list(dict.fromkeys(r["stage"] for r in self.rows))

    def refresh(self) -> None:
        """Take in what was appended since the last look."""
        with self._lock:
            self.rows += [json.loads(line) for _, line in self._metrics.read()]
            for offset, line in self._episodes.read():
                self._offsets.append(offset)
                self.summaries.append(self._summary(len(self.summaries), json.loads(line)))

    def episode(self, index: int) -> Episode:
        """Episode ``index`` (0-based, in file order), read from disk; ``IndexError`` if the
        run has no such episode."""
        self.refresh()
        if not 0 <= index < len(self._offsets):
            raise IndexError(f"{self.name} has {len(self._offsets)} episodes, not #{index}")
        with open(self._episodes.path, "rb") as f:
            f.seek(self._offsets[index])
            return Episode.from_dict(json.loads(f.readline()))

    def tokenizer(self):
        """The run's tokenizer (loaded once)."""
        if self._tokenizer is None:
            from posttrain.models import load_tokenizer

            found = next((self.path / d for d in MODEL_DIRS
                          if (self.path / d / "tokenizer_config.json").is_file()), None)
            if found is None:
                raise FileNotFoundError(f"{self.path} holds no model directory with a "
                                        f"tokenizer ({', '.join(MODEL_DIRS)})")
            self._tokenizer = load_tokenizer(found)
        return self._tokenizer

    def _summary(self, index: int, row: dict) -> dict:
        """From an ``episodes.jsonl`` row (``Episode.to_dict``); a group's samples share their
        prompt, decoded once."""
        first = row["segments"][0]
        start = next((i for i, m in enumerate(first["loss_mask"]) if m),
                     len(first["token_ids"]))
        prompt = tuple(first["token_ids"][:start])
        if prompt not in self._prompts:
            text = self.tokenizer().decode(list(prompt), skip_special_tokens=True)
            self._prompts[prompt] = text.strip()[-PROMPT_CHARS:]
        meta = row.get("meta", {})
        return {"index": index, "step": meta.get("step"),
                "task": str(next((meta[k] for k in TASK_KEYS if meta.get(k)), "")),
                "group": str(row.get("group_id", "")), "reward": float(row.get("reward", 0.0)),
                "finish_reason": row.get("finish_reason", "stop"),
                "length": sum(sum(s["loss_mask"]) for s in row["segments"]),
                "prompt": self._prompts[prompt]}
