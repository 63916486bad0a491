"""JSONL round trip for episodes (one JSON object a line), atomic text files, and how deeply a
parsed JSON value nests."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from posttrain.types.episode import Episode


def nesting_depth(value: object) -> int:
    """How deeply objects and arrays nest in ``value`` (0 for a scalar), without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else \
            item if isinstance(item, list) else None
        if children is not None:
            depth = max(depth, level)
            stack.extend((child, level + 1) for child in children)
    return depth


def write_episodes(path: str | Path, episodes: Iterable[Episode], append: bool = False) -> int:
    """Write episodes as JSONL; returns the number written."""
    n = 0
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for n, ep in enumerate(episodes, start=1):
            f.write(json.dumps(ep.to_dict(), separators=(",", ":")) + "\n")
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


def write_atomic(path: str | Path, text: str) -> None:
    """``text`` into ``path`` (its folders made), through a temporary file renamed over it: a
    reader sees the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
