"""Reading run directories while they are written, without loading them whole.

``RunFiles`` follows one run: ``metrics.jsonl`` rows from any row on (read from the byte where
the last read stopped), and ``episodes.jsonl`` through an index of each line's byte offset and
a small summary (step, group, reward, finish reason, trained length, whether its tokens were
traced, its question and response), extended as the file grows; one episode is read from disk
by its offset when asked for. A line still being written (no newline yet) waits for the next
read; a malformed line is skipped with a warning (``warnings``) and never shifts the index.
Nothing here needs a tokenizer: prompts are decoded (and cached) only when they are shown or
searched, with the run's tokenizer (its newest stage model, ``base_model``, or the
``model.path`` its ``config.yaml`` names) once there is one.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posttrain.types import Episode

MODEL_DIRS = ("rl_model", "opd_model", "pref_model", "distill_model", "sft_model", "base_model")
TASK_KEYS = ("task", "domain")  # where an episode's meta names its task family, if anywhere
RESPONSE_CHARS = 4000  # of an episode's response kept in its summary, for search


def runs_under(folder: Path, depth: int = 3) -> list[Path]:
    """``folder`` if it is a run (it holds ``metrics.jsonl``), else the runs in it, down to
    ``depth`` levels (as TensorBoard reads a log folder), in name order."""
    if (folder / "metrics.jsonl").is_file():
        return [folder]
    if depth == 0 or not folder.is_dir():
        return []
    return [run for sub in sorted(p for p in folder.iterdir() if p.is_dir())
            for run in runs_under(sub, depth - 1)]


@dataclass
class Tail:
    """The complete lines appended to a file since the last ``read``."""

    path: Path
    offset: int = 0
    lines: int = 0  # complete lines read so far

    def read(self) -> list[tuple[int, int, bytes]]:
        """``(byte offset, line number from 1, line)`` of every complete line past ``offset``."""
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        out, at = [], self.offset
        for line in data[:end].splitlines(keepends=True):
            self.lines += 1
            if line.strip():
                out.append((at, self.lines, line))
            at += len(line)
        self.offset += end
        return out


@dataclass
class Entry:
    """One indexed episode: where its line starts, its summary, its prompt's token ids."""

    offset: int
    summary: dict
    prompt_ids: tuple[int, ...]


def question_of(meta: dict) -> str:
    """The last user message of an agent episode's conversation ("" for other episodes)."""
    users = [m.get("content") for m in meta.get("messages") or []
             if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else ""


@dataclass
class RunFiles:
    """One run directory, read incrementally (thread-safe); ``name``: how the page calls it."""

    path: Path
    name: str = ""
    rows: list[dict] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the metric rows'
    _index_lock: threading.Lock = field(default_factory=threading.Lock)  # the episodes'
    _tokenizer: Any = None
    _prompts: dict[tuple[int, ...], str] = field(default_factory=dict)  # decoded, by ids

    def __post_init__(self) -> None:
        self.name = self.name or self.path.name
        self._metrics = Tail(self.path / "metrics.jsonl")
        self._episodes = Tail(self.path / "episodes.jsonl")

    @property
    def summaries(self) -> list[dict]:
        return [e.summary for e in self.entries]

    def stages(self) -> list[str]:
        self.refresh_metrics()
        return list(dict.fromkeys(r["stage"] for r in self.rows if "stage" in r))

    def refresh_metrics(self) -> None:
        """Take in the metric rows appended since the last look."""
        with self._lock:
            for _, number, line in self._metrics.read():
                row = _parsed(line)
                if isinstance(row, dict):
                    self.rows.append(row)
                else:
                    self.warnings.append(f"metrics.jsonl line {number}: not a JSON object, skipped")

    def refresh(self) -> None:
        """Take in the metric rows and the episodes appended since the last look (the
        episodes under a lock of their own: curves never wait for an index being built)."""
        self.refresh_metrics()
        with self._index_lock:
            for offset, number, line in self._episodes.read():
                try:
                    summary, prompt = _summary(len(self.entries), _parsed(line))
                except (TypeError, KeyError, IndexError, AttributeError):
                    self.warnings.append(f"episodes.jsonl line {number}: not an episode, skipped")
                    continue
                self.entries.append(Entry(offset, summary, prompt))

    def episode(self, index: int) -> Episode:
        """Episode ``index`` (0-based, among the episodes indexed), read from disk;
        ``IndexError`` if the run has no such episode."""
        self.refresh()
        if not 0 <= index < len(self.entries):
            raise IndexError(f"{self.name} has {len(self.entries)} episodes, not #{index}")
        with open(self._episodes.path, "rb") as f:
            f.seek(self.entries[index].offset)
            return Episode.from_dict(json.loads(f.readline()))

    def tokenizer(self):
        """The run's tokenizer, or None while it has none (looked for again each time)."""
        if self._tokenizer is None:
            found = next((d for d in self._model_dirs()
                          if (d / "tokenizer_config.json").is_file()), None)
            if found is not None:
                from posttrain.models import load_tokenizer

                self._tokenizer = load_tokenizer(found)
        return self._tokenizer

    def _model_dirs(self) -> list[Path]:
        model = ((self.config() or {}).get("model") or {}).get("path")
        return [self.path / d for d in MODEL_DIRS] + ([Path(model)] if model else [])

    def prompt(self, index: int) -> str:
        """Episode ``index``'s prompt decoded ("" until the run has a tokenizer); a group's
        samples share their prompt, decoded once."""
        ids = self.entries[index].prompt_ids
        if ids not in self._prompts:
            tokenizer = self.tokenizer()
            if tokenizer is None:
                return ""
            self._prompts[ids] = tokenizer.decode(list(ids), skip_special_tokens=True).strip()
        return self._prompts[ids]

    def config(self) -> dict | None:
        path = self.path / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.is_file() else None

    def summary_file(self) -> dict | None:
        path = self.path / "summary.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except json.JSONDecodeError:
            return None  # being written


def _parsed(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _summary(index: int, row: dict) -> tuple[dict, tuple[int, ...]]:
    """The summary of an ``episodes.jsonl`` row (``Episode.to_dict``) and its prompt's ids."""
    first = row["segments"][0]
    start = next((i for i, m in enumerate(first["loss_mask"]) if m), len(first["token_ids"]))
    meta = row.get("meta", {})
    response = meta.get("completion") or meta.get("final") or ""
    return {"index": index, "step": meta.get("step"),
            "task": str(next((meta[k] for k in TASK_KEYS if meta.get(k)), "")),
            "group": str(row.get("group_id", "")), "reward": float(row.get("reward", 0.0)),
            "finish_reason": row.get("finish_reason", "stop"),
            "length": sum(sum(s["loss_mask"]) for s in row["segments"]),
            "traced": bool(meta.get("token_stats")), "question": question_of(meta),
            "response": str(response)[:RESPONSE_CHARS]}, tuple(first["token_ids"][:start])
