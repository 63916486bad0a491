"""The harness-search store: one directory per candidate under ``<root>/candidates/<id>/``, holding
everything the outer loop and its proposer read. ``candidate.json`` (its config overrides, parent
and note), the candidate's own files (``harness.py``, a ``skills/`` bank, ...; an override value
``{candidate}`` names the directory), ``result.json`` (its score, context tokens, per-task outcomes,
or the error that stopped it) and ``traces.jsonl`` (every episode it played, raw).
``proposals/iNN.json`` holds each iteration's proposals and ``state.json`` the finished iterations.
Every file is written atomically, so a search killed at any point resumes from what it finished."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from posttrain.types import write_atomic

PLACEHOLDER = "{candidate}"


@dataclass(frozen=True)
class Candidate:
    """A harness: ``overrides`` (dotted config keys -> values) and ``files`` (relative path ->
    text) of its own; ``parent`` and ``note`` say where it came from."""

    id: str
    overrides: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    parent: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Result:
    """A candidate's evaluation: ``score`` (the accuracy over the search set), ``tokens`` (the
    mean tokens an episode holds), each task's outcome; or ``error`` (then no score)."""

    score: float | None
    tokens: float | None
    outcomes: list[float] = field(default_factory=list)
    error: str | None = None


class HarnessStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "candidates"

    def path(self, cid: str) -> Path:
        return self.dir / cid

    def add(self, candidate: Candidate) -> Path:
        """Write ``candidate`` (its files first, ``candidate.json`` last: a candidate without
        it was never added)."""
        d = self.path(candidate.id)
        for rel, text in candidate.files.items():
            write_atomic(d / rel, text)
        write_atomic(d / "candidate.json", json.dumps(
            {k: v for k, v in asdict(candidate).items() if k != "files"}, indent=2))
        return d

    def candidates(self) -> list[Candidate]:
        """Every candidate added, in id order, with its files."""
        out = []
        for meta in sorted(self.dir.glob("*/candidate.json")):
            d, record = meta.parent, json.loads(meta.read_text())
            files = {str(f.relative_to(d)): f.read_text() for f in sorted(d.rglob("*"))
                     if f.is_file() and f.name not in RECORDS and not f.name.startswith(".")}
            out.append(Candidate(record["id"], record["overrides"], files, record["parent"],
                                 record["note"]))
        return out

    def overrides(self, candidate: Candidate) -> dict[str, Any]:
        """Its overrides with ``{candidate}`` replaced by its directory."""
        d = str(self.path(candidate.id))
        return json.loads(json.dumps(candidate.overrides).replace(PLACEHOLDER, d))

    def record(self, cid: str, result: Result, traces: list[dict]) -> None:
        write_atomic(self.path(cid) / "traces.jsonl", "".join(json.dumps(t) + "\n" for t in traces))
        write_atomic(self.path(cid) / "result.json", json.dumps(asdict(result), indent=2))

    def result(self, cid: str) -> Result | None:
        f = self.path(cid) / "result.json"
        return Result(**json.loads(f.read_text())) if f.is_file() else None

    def traces(self, cid: str) -> list[dict]:
        f = self.path(cid) / "traces.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.is_file() else []

    def results(self) -> dict[str, Result]:
        """Every evaluated candidate's result, by id (its directory's name)."""
        return {f.parent.name: Result(**json.loads(f.read_text()))
                for f in sorted(self.dir.glob("*/result.json"))}

    def propose(self, iteration: int, candidates: list[Candidate]) -> None:
        """Keep an iteration's proposals (``proposals/iNN.json``) before any is evaluated."""
        write_atomic(self.root / "proposals" / f"i{iteration:02d}.json",
                     json.dumps([asdict(c) for c in candidates], indent=2))

    def proposals(self, iteration: int) -> list[Candidate] | None:
        f = self.root / "proposals" / f"i{iteration:02d}.json"
        return [Candidate(**c) for c in json.loads(f.read_text())] if f.is_file() else None

    @property
    def iterations(self) -> int:
        f = self.root / "state.json"
        return json.loads(f.read_text())["iterations"] if f.is_file() else 0

    def finish_iteration(self, n: int) -> None:
        write_atomic(self.root / "state.json", json.dumps({"iterations": n}))


RECORDS = ("candidate.json", "result.json", "traces.jsonl")
