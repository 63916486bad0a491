"""Verifiers: score a completion's text against a reference answer. Never raise on bad text."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from posttrain.config.family import member

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
STRICT_FORMAT_RE = re.compile(r"^\s*(?:<think>.*?</think>\s*)?<answer>[^<]*</answer>\s*$",
                              re.DOTALL)

Verifier = Callable[[str, str], float | None]  # None: the reference cannot be read


def extract_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>``, stripped; ``None`` when there is none."""
    found = ANSWER_RE.findall(text or "")
    return found[-1].strip() if found else None


def gold_text(reference: str) -> str:
    """The answer part of a reference: what follows GSM8K's ``####``, else all of it."""
    return reference.rsplit("####", 1)[-1].strip()


def as_number(s: str | None) -> float | None:
    """``s`` as a finite number (commas and spaces dropped: ``1,000``); None if it is not."""
    if s is None:
        return None
    try:
        x = float(s.replace(",", "").replace(" ", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


@member("verifier", "exact")
def exact(completion: str, reference: str) -> float:
    """1 if the extracted answer equals the reference string exactly (after stripping)."""
    return float(extract_answer(completion) == reference.strip())


@member("verifier", "numeric", fallible=True)
def numeric(completion: str, reference: str, rel_tol: float = 1e-9) -> float | None:
    """1 if the extracted answer parses as a number equal to the reference (a GSM8K solution's
    ``#### 72`` reads as 72) within ``rel_tol``; None when the reference is not a number."""
    want = as_number(gold_text(reference))
    if want is None:
        return None
    got = as_number(extract_answer(completion))
    return 0.0 if got is None else float(math.isclose(got, want, rel_tol=rel_tol, abs_tol=1e-12))


@member("verifier", "format")
def format_ok(completion: str, reference: str = "") -> float:
    """1 if the whole completion is ``[<think>...</think>] <answer>...</answer>``."""
    return float(bool(STRICT_FORMAT_RE.match(completion or "")))
