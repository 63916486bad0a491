"""The rule verifiers under their canonical names (``exact_match``, ``numeric_match``, ...,
docs/config.md). Each scores a completion's text against a reference and never raises on bad
text."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from posttrain.config.family import member
from posttrain.rewards.verifiers import extract_answer

NUMBER_RE = re.compile(r"(?:^|\s|=)\s*(-?\d*\.?\d+)\s*$")
FORMAT_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
BOXED_RE = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


def parse_numeric(text: str | None, strip_commas: bool = False) -> float | None:
    """The numeric parser of A. Burkov's "GRPO from scratch" code (2025): drop ``$`` and ``%``, take
    a trailing number (``"x = 3.5"`` -> 3.5); ``"1,000"`` (unless ``strip_commas``), ``"The answer
    is 42."`` and ``"5 apples"`` -> None."""
    if text is None:
        return None
    s = text.replace("$", "").replace("%", "")
    if strip_commas:
        s = s.replace(",", "")
    m = NUMBER_RE.search(s.strip())
    return float(m.group(1)) if m else None


def answer_tag(text: str) -> str | None:
    """The last ``<answer>`` content; None when missing or the placeholder ``...``."""
    found = extract_answer(text)
    return None if found is None or found == "..." else found


def gsm8k_gold(solution: str) -> str:
    """The GSM8K reference answer: what follows ``####``."""
    return solution.split("####")[1].strip()


@member("verifier", "exact_match")
def exact_match(completion: str, reference: str) -> float:
    """1 if the answer tag's content equals the reference (both stripped)."""
    got = answer_tag(completion)
    return float(got is not None and got.strip() == reference.strip())


@member("verifier", "numeric_match")
def numeric_match(completion: str, reference: str) -> float:
    """1 if the answer tag's content and the reference parse (``parse_numeric``) to equal
    floats (``"42.0"`` matches ``"42"``)."""
    got, want = parse_numeric(answer_tag(completion)), parse_numeric(reference)
    return float(got is not None and want is not None and math.isclose(got, want))


@member("verifier", "gsm8k_combined")
def gsm8k_combined(completion: str, reference: str) -> float:
    """Correctness 2.0 (exact) / 1.5 (numeric) / 0, plus 0.2 for each of ``<reasoning>``,
    ``</reasoning>``, ``<answer>``, ``</answer>`` present (no order check); in [0, 2.8]."""
    correct = 2.0 if exact_match(completion, reference) else (
        1.5 if numeric_match(completion, reference) else 0.0)
    return correct + 0.2 * sum(tag in (completion or "") for tag in FORMAT_TAGS)


@member("verifier", "dapo_pm1")
def dapo_pm1(completion: str, reference: str) -> float:
    """+1 if the answer is equivalent (exact or numeric), else -1 (DAPO)."""
    ok = exact_match(completion, reference) or numeric_match(completion, reference)
    return 1.0 if ok else -1.0


@member("verifier", "think_format")
def think_format(completion: str, reference: str = "") -> float:
    """1 if a ``<think>...</think>`` block is present (R1)."""
    return float(bool(re.search(r"<think>.*?</think>", completion or "", re.DOTALL)))


@member("verifier", "lang_consistency")
def lang_consistency(completion: str, reference: str = "", lang: str = "en") -> float:
    """Share of the chain of thought's words in the target language (``en``: Latin letters;
    ``zh``: CJK characters); numbers are not words. 0 without words."""
    words = [w for w in re.findall(r"\w+", completion or "") if not re.fullmatch(r"[\d_]+", w)]
    if not words:
        return 0.0
    if lang == "en":
        hits = sum(bool(re.fullmatch(r"[A-Za-z]+", w)) for w in words)
    elif lang == "zh":
        hits = sum(bool(re.search(r"[\u4e00-\u9fff]", w)) for w in words)
    else:
        raise ValueError(f"lang_consistency: unknown language {lang!r} (en, zh)")
    return hits / len(words)


def tau_product(components: Mapping[str, float], reward_basis: Sequence[str]) -> tuple[float, bool]:
    """tau-bench: the product of the components in ``reward_basis``; success iff
    ``|R - 1| <= 1e-6``."""
    reward = math.prod(components[name] for name in reward_basis)
    return reward, abs(reward - 1) <= 1e-6

