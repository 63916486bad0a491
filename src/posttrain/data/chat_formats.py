"""Conversation rows in the formats users already have, as OpenAI chat messages.

- OpenAI: ``{"messages": [...], "tools": [...]}``; an assistant message may carry
  ``tool_calls`` (``arguments`` a JSON string or an object) and ``reasoning_content``; a
  ``tool`` message ``tool_call_id`` and ``name``.
- ShareGPT: ``{"conversations": [{"from": "human" | "gpt" | "system" | "function_call" |
  "observation", "value": ...}], "tools": ...}``; a ``function_call`` value is the JSON call.
- TRL: ``{"prompt", "completion"}``, each a string or a list of messages.

``datasets`` before 5.0 gives every row every struct field of its column: an object's key that
another row has and this one lacks comes back as null (5.0 keeps such columns as JSON).
Null-valued keys of tool-call arguments and tool schemas are therefore dropped (give arguments
as a JSON string to keep a null).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "model": "assistant", "system": "system", "observation": "tool",
                  "tool": "tool", "function_response": "tool", "function_call": "assistant"}


@dataclass(frozen=True)
class Conversation:
    """Chat messages to train on and the tool schemas rendered with them (None: none)."""

    messages: list[dict]
    tools: list[dict] | None = None


def without_nulls(value: Any) -> Any:
    """``value`` with null-valued object keys removed, recursively."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _json(text: str, error: str) -> Any:
    """``text`` parsed; ``ValueError(f"{error} (why)")`` if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{error} ({e})") from None


def tool_call(call: Any) -> dict:
    """A tool call as ``{"type": "function", "function": {"name", "arguments": {...}}}``
    (arguments as an object: what chat templates render)."""
    if not isinstance(call, dict):
        raise ValueError(f"a tool call is an object, got {call!r}")
    fn = call.get("function", call)
    name, arguments = fn.get("name"), fn.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool call needs a name, got {call!r}")
    arguments = (_json(arguments or "{}", f"tool call {name!r}: arguments are not JSON")
                 if isinstance(arguments, str) else without_nulls(arguments))
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call {name!r}: arguments must be an object")
    out = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def message(m: Any) -> dict:
    """One OpenAI message, checked and reduced to the fields templates read."""
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise ValueError(f"a message needs a role in {ROLES}, got {m!r}")
    calls = m.get("tool_calls") or []
    content = m.get("content")
    if content is None and not (m["role"] == "assistant" and calls):
        raise ValueError(f"a {m['role']} message needs string content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message content must be a string, got {type(content).__name__}")
    out = {"role": m["role"], "content": content or ""}
    if calls:
        if m["role"] != "assistant" or not isinstance(calls, list):
            raise ValueError("tool_calls belong to an assistant message, as a list")
        out["tool_calls"] = [tool_call(c) for c in calls]
    return out | {k: m[k] for k in ("reasoning_content", "tool_call_id", "name")
                  if isinstance(m.get(k), str)}


def messages_of(value: Any, what: str) -> list[dict]:
    """A cell as chat messages: a string is one user message (one assistant message for a
    ``completion``); a list must be messages (``message``)."""
    if isinstance(value, str):
        return [{"role": "user" if what == "prompt" else "assistant", "content": value}]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a string or a non-empty list of messages")
    return [message(m) for m in value]


def _sharegpt(turns: Any) -> list[dict]:
    if not isinstance(turns, list) or not turns:
        raise ValueError("conversations must be a non-empty list of turns")
    out = []
    for t in turns:
        if not isinstance(t, dict) or t.get("from") not in SHAREGPT_ROLES \
                or not isinstance(t.get("value"), str):
            raise ValueError(f"a ShareGPT turn needs 'from' in {sorted(SHAREGPT_ROLES)} and a "
                             f"string 'value', got {t!r}")
        if t["from"] == "function_call":
            call = _json(t["value"], "a function_call value is not JSON")
            out.append({"role": "assistant", "content": "", "tool_calls": [tool_call(call)]})
        else:
            out.append({"role": SHAREGPT_ROLES[t["from"]], "content": t["value"]})
    return out


def tool_schemas(value: Any) -> list[dict] | None:
    """A ``tools`` cell as a list of tool schemas (a JSON string is parsed; null keys are
    dropped); None for an empty or null cell. ``ValueError`` says what is wrong."""
    if value is None:
        return None
    if isinstance(value, str):
        value = _json(value, "tools are not JSON")
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValueError("tools must be a list of tool schemas")
    return without_nulls(value) or None


def conversation(row: Any) -> Conversation:
    """The conversation of a row in any of the formats above; ``ValueError`` names what is
    wrong. It must contain an assistant turn to train on."""
    if not isinstance(row, dict):
        raise ValueError("a row must be an object")
    has = {k for k, v in row.items() if v is not None}  # a null cell is an absent one
    if "messages" in has:
        messages = messages_of(row["messages"], "messages")
    elif "conversations" in has:
        messages = _sharegpt(row["conversations"])
    elif {"prompt", "completion"} <= has:
        messages = messages_of(row["prompt"], "prompt") + messages_of(row["completion"],
                                                                      "completion")
    else:
        raise ValueError("a row needs 'messages' (OpenAI), 'conversations' (ShareGPT) or "
                         f"'prompt' and 'completion' (TRL); it has {', '.join(has) or 'nothing'}")
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError("no assistant message to train on")
    return Conversation(messages, tool_schemas(row.get("tools")))
