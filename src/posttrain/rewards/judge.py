"""Prompts and reply parsing of a judge (generative reward model, docs/reward_models.md): a grading
prompt with a rubric that asks for ``<score>N</score>`` on a ``0..score_max`` scale, and a
pairwise comparison prompt that asks for ``<winner>A|B|tie</winner>``. Parsing takes the last
tag and returns None for anything else: garbage never becomes a score."""

from __future__ import annotations

import re
from collections.abc import Sequence

VERDICT = re.compile(r"<winner>\s*(A|B|tie)\s*</winner>", re.IGNORECASE)
OUTCOME = {"a": 1.0, "b": 0.0, "tie": 0.5}


def question_of(messages: Sequence[dict]) -> str:
    """The last user message of a prompt: what the judged response answers."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    return users[-1] if users else ""


def score_messages(question: str, response: str, rubric: str, score_max: float) -> list[dict]:
    system = (f"You grade answers. Rubric: {rubric}\nThink briefly, then end with the grade "
              f"from 0 to {score_max:g} as <score>N</score>.")
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Question:\n{question}\n\nResponse:\n{response}"}]


def comparison_messages(question: str, a: str, b: str, rubric: str) -> list[dict]:
    system = (f"You compare two answers. Rubric: {rubric}\nThink briefly, then end with "
              "<winner>A</winner>, <winner>B</winner> or <winner>tie</winner>.")
    user = f"Question:\n{question}\n\nAnswer A:\n{a}\n\nAnswer B:\n{b}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def extract_verdict(reply: str) -> float | None:
    """1 (A wins), 0 (B wins), 0.5 (tie) from the last ``<winner>`` tag; None without one."""
    matches = VERDICT.findall(reply)
    return OUTCOME[matches[-1].lower()] if matches else None
