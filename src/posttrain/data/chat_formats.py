"""Conversation rows in the formats users already have, as OpenAI chat messages.

- OpenAI: ``{"messages": [...], "tools": [...]}``; an assistant message may carry
  ``tool_calls`` (``arguments`` a JSON string or an object) and ``reasoning_content``; a
  ``tool`` message ``tool_call_id`` and ``name``.
- ShareGPT: ``{"conversations": [{"from": "human" | "gpt" | "system" | "function_call" |
  "observation", "value": ...}], "tools": ...}``; a ``function_call`` value is the JSON call.
- TRL: ``{"prompt", "completion"}``, each a string or a list of messages.

Any of them may carry ``quick``: quick-instruction answers (``{"<action>": "search", ...}``,
``models.quick_tokens``), asked after the messages up to the last user message. A row with
them needs no assistant message.

``datasets`` before 5.0 gives every row every struct field of its column: an object's key that
another row has and this one lacks comes back as null (5.0 keeps such columns as JSON).
Null-valued keys of tool-call arguments and tool schemas are therefore dropped (give arguments
as a JSON string to keep a null).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from posttrain.models.quick_tokens import NAME as QUICK_NAME
from posttrain.models.quick_tokens import QUICK_ROLE

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "model": "assistant", "system": "system", "observation": "tool",
                  "tool": "tool", "function_response": "tool", "function_call": "assistant"}


@dataclass(frozen=True)
class Conversation:
    """Chat messages to train on, the tool schemas rendered with them (None: none) and the
    answers to quick instructions asked after the last user message."""

    messages: list[dict]
    tools: list[dict] | None = None
    quick: dict[str, str] = field(default_factory=dict)

    def quick_examples(self) -> list[list[dict]]:
        """One conversation per quick instruction: the messages through the last user
        message, then the instruction and its answer (``models.chat``)."""
        last_user = max(i for i, m in enumerate(self.messages) if m["role"] == "user")
        return [[*self.messages[: last_user + 1], {"role": QUICK_ROLE, "name": n, "content": a}]
                for n, a in self.quick.items()]


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


def quick_answers(value: Any) -> dict[str, str]:
    """A ``quick`` cell as ``{instruction: answer}`` (null answers dropped: another row's
    instruction); ``ValueError`` says what is wrong."""
    value = without_nulls(value) or {}
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and QUICK_NAME.fullmatch(k) and isinstance(v, str)
            for k, v in value.items()):
        raise ValueError("quick must map quick-instruction tokens such as '<action>' to "
                         f"answer strings, got {value!r}")
    return value


def conversation(row: Any) -> Conversation:
    """The conversation of a row in any of the formats above; ``ValueError`` names what is
    wrong. It must contain an assistant turn or quick answers to train on."""
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
    quick = quick_answers(row.get("quick"))
    if quick and not any(m["role"] == "user" for m in messages):
        raise ValueError("quick instructions are asked after a user message; there is none")
    if not quick and not any(m["role"] == "assistant" for m in messages):
        raise ValueError("no assistant message (or quick answers) to train on")
    return Conversation(messages, tool_schemas(row.get("tools")), quick)
