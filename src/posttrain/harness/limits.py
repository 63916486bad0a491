"""The harness's limits: when an agent episode ends (``LoopLimits``), and how much of a tool's
output the model sees.

Tool output is cut deterministically, head and tail: at most ``max_lines`` lines (half from
the head, half from the tail) and at most ``max_bytes`` UTF-8 bytes, cut at character
boundaries, with a marker saying what was omitted; the full output stays in the episode
record.
"""

from __future__ import annotations

MAX_LINES = 256
MAX_BYTES = 10 * 1024


def _cut_bytes(text: str, budget: int, from_end: bool) -> str:
    """The longest prefix (or suffix) of ``text`` within ``budget`` UTF-8 bytes."""
    data = text.encode()
    piece = data[len(data) - budget:] if from_end else data[:budget]
    return piece.decode(errors="ignore")  # a split character at the cut is dropped


def truncate_output(text: str, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> str:
    """``text`` if it fits, else its head and tail around an ``[... omitted ...]`` marker."""
    lines = text.splitlines(keepends=True)
    if len(lines) > max_lines:
        head, tail = max_lines // 2, max_lines - max_lines // 2
        marker = f"[... omitted {len(lines) - max_lines} of {len(lines)} lines ...]\n"
        text = "".join(lines[:head]) + marker + "".join(lines[len(lines) - tail:])
    size = len(text.encode())
    if size <= max_bytes:
        return text
    half = max_bytes // 2
    head, tail = _cut_bytes(text, half, False), _cut_bytes(text, max_bytes - half, True)
    omitted = size - len(head.encode()) - len(tail.encode())
    return f"{head}\n[... omitted {omitted} of {size} bytes ...]\n{tail}"
