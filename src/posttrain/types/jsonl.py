"""JSONL round trip for episodes: one JSON object a line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from posttrain.types.episode import Episode


def write_episodes(path: str | Path, episodes: Iterable[Episode], append: bool = False) -> int:
    """Write episodes as JSONL; returns the number written."""
    n = 0
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), separators=(",", ":")) + "\n")
            n += 1
    return n


def read_episodes(path: str | Path, offset: int = 0) -> Iterator[Episode]:
    """Read episodes from JSONL, from byte ``offset`` on (a line's start). A malformed line
    raises ``ValueError`` naming its line number (counted from ``offset``)."""
    with open(path, encoding="utf-8") as f:
        f.seek(offset)
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield Episode.from_dict(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: malformed episode: {e}") from e
