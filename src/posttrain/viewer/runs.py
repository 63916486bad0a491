"""Reading run directories while they are written, without loading them whole.

``RunFiles`` follows one run: ``metrics.jsonl`` rows from any row on (read from the byte where
the last read stopped), and ``episodes.jsonl`` through an index of each line's byte offset and
a small summary (step, group, reward, finish reason, trained length, whether its tokens were
traced, its question and response), extended as the file grows; one episode is read from disk
by its offset when asked for. A line still being written (no newline yet) waits for the next
read; a line that is not a row or an episode (``BadLine``: broken JSON, an integer past
Python's 4,300 digits, nesting past the recursion limit, a reward that is no finite number...)
is skipped with a warning (logged, counted in ``skipped``, the newest kept in ``warnings``),
never shifts the index and never costs the lines after it.
Nothing here needs a tokenizer: prompts are decoded (and cached) only when they are shown or
searched, with the run's tokenizer (its newest stage model, ``base_model``, or the
``model.path`` its ``config.yaml`` names) once there is one.
"""

from __future__ import annotations

import json
import logging
import math
import reprlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posttrain.types import Episode
from posttrain.types.jsonl import nesting_depth

MODEL_DIRS = ("rl_model", "opd_model", "pref_model", "distill_model", "sft_model", "base_model")
RUN_FILES = ("metrics.jsonl", "config.yaml", "episodes.jsonl", "summary.json")  # any: a run
TASK_KEYS = ("task", "domain")  # where an episode's meta names its task family, if anywhere
RESPONSE_CHARS = 4000  # of an episode's response kept in its summary, for search
META_DEPTH = 32  # an episode's meta nested deeper is refused (rendering it recurses)
WARNINGS_KEPT = 100  # the newest skipped lines' warnings a run keeps (all are counted)
log = logging.getLogger(__name__)


class BadLine(ValueError):
    """A line of a run's file that is not what the file holds: why, in a few words."""


def runs_under(folder: Path, depth: int = 3) -> list[Path]:
    """``folder`` if it is a run (it holds one of ``RUN_FILES``), else the runs in it, down
    to ``depth`` levels (as TensorBoard reads a log folder), in name order; a folder with no
    run in it is itself a run that has written nothing yet. [] if ``folder`` is no folder."""
    if not folder.is_dir():
        return []
    return _runs_in(folder, depth) or [folder]


def _runs_in(folder: Path, depth: int) -> list[Path]:
    """The folders at most ``depth`` levels under ``folder`` (itself included) that hold a
    run's file, in name order (none under a run)."""
    if any((folder / name).is_file() for name in RUN_FILES):
        return [folder]
    if depth == 0:
        return []
    return [run for sub in sorted(p for p in folder.iterdir() if p.is_dir())
            for run in _runs_in(sub, depth - 1)]


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
    messages = meta.get("messages")
    users = [m.get("content") for m in messages if isinstance(m, dict)
             and m.get("role") == "user"] if isinstance(messages, list) else []
    return users[-1] if users and isinstance(users[-1], str) else ""


@dataclass
class RunFiles:
    """One run directory, read incrementally (thread-safe); ``name``: how the page calls it."""

    path: Path
    name: str = ""
    rows: list[dict] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the newest skipped lines'
    skipped: int = 0  # lines skipped in all
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the metric rows'
    _index_lock: threading.Lock = field(default_factory=threading.Lock)  # the episodes'
    _warn_lock: threading.Lock = field(default_factory=threading.Lock)  # the warnings'
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
                try:
                    self.rows.append(metric_row(line))
                except BadLine as bad:
                    self._skip("metrics.jsonl", number, bad)

    def refresh(self) -> None:
        """Take in the metric rows and the episodes appended since the last look (the
        episodes under a lock of their own: curves never wait for an index being built)."""
        self.refresh_metrics()
        with self._index_lock:
            for offset, number, line in self._episodes.read():
                try:
                    summary, prompt = _summary(len(self.entries), json_object(line))
                except BadLine as bad:
                    self._skip("episodes.jsonl", number, bad)
                    continue
                self.entries.append(Entry(offset, summary, prompt))

    def _skip(self, file: str, number: int, bad: BadLine) -> None:
        """Line ``number`` of ``file`` skipped: logged, counted, its warning kept for the page."""
        message = f"{file} line {number}: {bad}, skipped"
        log.warning("%s: %s", self.name, message)
        with self._warn_lock:
            self.skipped += 1
            self.warnings.append(message)
            del self.warnings[:-WARNINGS_KEPT]

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


def json_object(line: bytes) -> dict:
    """A line's JSON object; ``BadLine`` saying why it is none."""
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadLine("not UTF-8 text") from None
    except RecursionError:
        raise BadLine("JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise BadLine(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # an integer past Python's int-parsing limit
        raise BadLine(f"a number too long to read ({str(exc).split(':')[0]})") from None
    if not isinstance(value, dict):
        raise BadLine(f"not a JSON object (a {type(value).__name__})")
    return value


def metric_row(line: bytes) -> dict:
    """A ``metrics.jsonl`` row: an object with a numeric ``step`` and, where it names one,
    a text ``stage`` (what the page draws a row by); ``BadLine`` otherwise."""
    row = json_object(line)
    if "step" not in row:
        raise BadLine("it has no step")
    finite(row["step"], "step")
    if not isinstance(row.get("stage", ""), str):
        raise BadLine(f"its stage is not a text ({shown(row['stage'])})")
    return row


def finite(value: Any, what: str) -> float:
    """``value`` as a float; ``BadLine`` naming ``what`` unless it is a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadLine(f"its {what} is not a number ({shown(value)})")
    try:
        number = float(value)
    except OverflowError:
        raise BadLine(f"its {what} is past a float's range ({len(str(value))} digits)") from None
    if not math.isfinite(number):
        raise BadLine(f"its {what} is not finite ({number})")
    return number


def shown(value: Any) -> str:
    """``value`` shortened for a warning (however long or deep it is)."""
    return reprlib.repr(value)


def _summary(index: int, row: dict) -> tuple[dict, tuple[int, ...]]:
    """The summary of an ``episodes.jsonl`` row (``Episode.to_dict``) and its prompt's ids;
    ``BadLine`` unless it reads as an ``Episode`` with a finite reward and an integer step."""
    finite(row.get("reward", 0.0), "reward")
    try:
        episode = Episode.from_dict(row)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise BadLine(f"not an episode ({type(exc).__name__}: {str(exc)[:80]})") from None
    meta, first = episode.meta, episode.segments[0]
    if nesting_depth(meta) > META_DEPTH:
        raise BadLine(f"its meta nests more than {META_DEPTH} levels deep")
    step = meta.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise BadLine(f"its meta.step is not an integer ({shown(step)})")
    response = meta.get("completion") or meta.get("final") or ""
    prompt = tuple(first.token_ids[:first.first_sampled])
    return {"index": index, "step": step,
            "task": str(next((meta[k] for k in TASK_KEYS if meta.get(k)), "")),
            "group": episode.group_id, "reward": episode.reward,
            "finish_reason": episode.finish_reason,
            "length": sum(s.num_trainable for s in episode.segments),
            "traced": bool(meta.get("token_stats")), "question": question_of(meta),
            "response": str(response)[:RESPONSE_CHARS]}, prompt
