"""P-GenRM's structured evaluation chain (arXiv 2602.12116): the judge writes the
user's persona, their core preference, weighted criteria with a score each, then a final
score; ``extract`` reads it back and survives garbled chains.

A chain, as the prompt asks for it::

    Persona: a retired teacher who reads slowly
    Core preference: short, plain answers
    Criterion: brevity | weight 0.6 | score 8
    Criterion: accuracy | weight 0.4 | score 6
    Final score: 7.2

``extract`` takes the last well-formed ``Final score`` on the scale. Without one it takes the
criteria's weighted mean, the weights normalised, over the criteria whose weight and score
both parse. With neither, the grading is *missing* (None), never 0."""

from __future__ import annotations

import math
import re

FINAL = re.compile(r"final\s*score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
CRITERION = re.compile(r"criterion\s*:[^|\n]*\|\s*weight\s*[:=]?\s*(-?\d+(?:\.\d+)?)\s*\|"
                       r"\s*score\s*[:=]?\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


def chain_messages(question: str, response: str, user: str, score_max: float = 10.0
                   ) -> list[dict]:
    """The judge's prompt: what is known of the ``user``, the question and the response,
    and the chain to write on ``0..score_max``."""
    system = ("You judge a response for one user. Write, one per line: 'Persona: ...' (who "
              "the user is), 'Core preference: ...', then two to four lines 'Criterion: name | "
              f"weight W | score S' (weights summing to 1, scores 0 to {score_max:g}), then "
              f"'Final score: N' (0 to {score_max:g}).")
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"About the user:\n{user}\n\nQuestion:\n{question}"
                                        f"\n\nResponse:\n{response}"}]


def extract(text: str, score_max: float = 10.0) -> float | None:
    """The chain's score in ``[0, 1]`` (module docstring), or None when nothing parses."""
    finals = [float(m) for m in FINAL.findall(text)]
    finals = [v for v in finals if math.isfinite(v) and 0 <= v <= score_max]
    if finals:
        return finals[-1] / score_max
    criteria = [(float(w), float(s)) for w, s in CRITERION.findall(text)]
    criteria = [(w, s) for w, s in criteria if 0 < w and 0 <= s <= score_max]
    total = sum(w for w, _ in criteria)
    if not criteria or not math.isfinite(total):
        return None
    return sum(w * s for w, s in criteria) / total / score_max
