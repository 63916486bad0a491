"""Context management on message lists (docs/agents.md): when to compact, and the
deterministic strategies. Messages are chat dicts; an assistant message calls tools when it
holds ``<tool_call>`` markup (or a ``tool_calls`` field), and its reasoning, if any, is in
``reasoning_content`` or, as the agent loop records a sampled turn, a ``<think>...</think>``
block in its content. Summarising strategies need a model and live in the loop."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from posttrain.config.sections.agent import RETENTION

CLEARED = "[Old tool result content cleared]"
THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def _calls_tools(msg: dict) -> bool:
    return msg["role"] == "assistant" and (
        bool(msg.get("tool_calls")) or "<tool_call>" in (msg.get("content") or ""))


def _tool_turns(messages: Sequence[dict]) -> list[list[int]]:
    """Index lists of each tool-call turn: the calling assistant message and its results."""
    turns: list[list[int]] = []
    for i, msg in enumerate(messages):
        if _calls_tools(msg):
            turns.append([i])
        elif msg["role"] == "tool" and turns and turns[-1][-1] == i - 1:
            turns[-1].append(i)
    return turns


def discard_tool_turns(messages: Sequence[dict], fraction: float = 0.75) -> list[dict]:
    """``discard_75``: delete the oldest ``ceil(fraction * n)`` of the ``n`` tool-call turns
    (call and results together); ``fraction=1`` is ``discard_all``."""
    turns = _tool_turns(messages)
    drop = {i for turn in turns[: math.ceil(fraction * len(turns))] for i in turn}
    return [m for i, m in enumerate(messages) if i not in drop]


def microcompact(messages: Sequence[dict], keep_last: int = 5) -> list[dict]:
    """Keep the last ``keep_last`` tool results; older ones read ``[Old tool result content
    cleared]``."""
    results = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    old = set(results[: max(len(results) - keep_last, 0)])
    return [{**m, "content": CLEARED} if i in old else dict(m) for i, m in enumerate(messages)]


def select_recent_user_messages(token_counts: Sequence[int], budget: int = 20_000) -> list[int]:
    """``codex_compact``'s rebuild: indices of the real user messages kept, chosen newest to
    oldest while their total stays within ``budget`` (whole messages only), in order."""
    kept, total = [], 0
    for i in reversed(range(len(token_counts))):
        if total + token_counts[i] > budget:
            break
        kept.append(i)
        total += token_counts[i]
    return sorted(kept)


def drop_reasoning_on_new_user(messages: Sequence[dict]) -> list[dict]:
    """``drop_on_new_user`` (V3.2): reasoning of turns before the last user message is removed
    (``reasoning_content`` and ``<think>`` blocks in an assistant's content); tool calls and
    answers stay, and so does reasoning inside the current tool-calling chain."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    out = []
    for i, m in enumerate(messages):
        if i < last_user and _has_reasoning(m):
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
            if isinstance(m.get("content"), str):
                m["content"] = THINK.sub("", m["content"])
            if m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls"):
                continue  # a message that was only reasoning disappears
        out.append(dict(m))
    return out


def _has_reasoning(msg: dict) -> bool:
    return "reasoning_content" in msg or (
        msg["role"] == "assistant" and "<think>" in (msg.get("content") or ""))


def retain_reasoning(messages: Sequence[dict], mode: str = "auto_v4") -> list[dict]:
    """Reasoning retention across turns: ``drop_on_new_user`` (V3.2), ``keep_all`` (V4 with
    tools), or ``auto_v4`` (``keep_all`` when the episode calls tools, else drop)."""
    if mode not in RETENTION:
        raise ValueError(f"unknown reasoning retention {mode!r}; one of {', '.join(RETENTION)}")
    if mode == "keep_all" or (mode == "auto_v4" and any(_calls_tools(m) for m in messages)):
        return [dict(m) for m in messages]
    return drop_reasoning_on_new_user(messages)
