"""Verifiers: score a completion's text against a reference answer. Never raise on bad text."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
STRICT_FORMAT_RE = re.compile(
    r"^\s*(?:<think>.*?</think>\s*)?<answer>[^<]*</answer>\s*$", re.DOTALL
)

Verifier = Callable[[str, str], float]


def extract_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>``, stripped; ``None`` when there is none."""
    found = ANSWER_RE.findall(text or "")
    return found[-1].strip() if found else None


def _number(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        x = float(s.replace(",", "").replace(" ", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def exact(completion: str, reference: str) -> float:
    """1 if the extracted answer equals the reference string exactly (after stripping)."""
    return float(extract_answer(completion) == reference.strip())


def numeric(completion: str, reference: str, rel_tol: float = 1e-9) -> float:
    """1 if the extracted answer parses as a number equal to the reference within ``rel_tol``."""
    got, want = _number(extract_answer(completion)), _number(reference)
    if got is None or want is None:
        return 0.0
    return float(math.isclose(got, want, rel_tol=rel_tol, abs_tol=1e-12))


def format_ok(completion: str, reference: str = "") -> float:
    """1 if the whole completion is ``[<think>...</think>] <answer>...</answer>``."""
    return float(bool(STRICT_FORMAT_RE.match(completion or "")))
