"""A request's messages, checked and rendered for the chat template.

``normalised`` checks what the template will read: every message has a known role and text
content, every tool call a name and arguments that are a JSON object (a dict is serialised,
an empty string is ``{}``); anything else is a ``RequestError`` naming the message.
``rendered`` writes tool calls into the text: an assistant message whose calls the server
itself returned (known by their ids) is the exact text it sampled, so a client that sends the
message back bridges whatever it did to the call's spacing or numbers; other calls are written
in the model's tool-call format. A reply without calls whose text is one the server returned
in the session is the text it sampled (special tokens included, which the visible text
drops).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from posttrain.engines.chat import as_template_messages
from posttrain.serve.requests import RequestError
from posttrain.serve.tool_formats import ToolFormat

ROLES = ("system", "user", "assistant", "tool")


def _arguments(raw, where: str) -> str:
    if isinstance(raw, dict):
        return json.dumps(raw)
    if raw in (None, ""):
        return "{}"
    try:
        if isinstance(raw, str) and isinstance(json.loads(raw), dict):
            return raw
    except json.JSONDecodeError:
        pass
    raise RequestError(f"{where}.arguments must be a JSON object (as text)", where)


def normalised(messages: list[dict]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(f"{where} must be an object with a role in {ROLES}", where)
        calls = []
        for k, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RequestError(f"{where}.tool_calls.{k} needs a function with a name",
                                   f"{where}.tool_calls.{k}")
            calls.append({"id": call.get("id"), "type": "function", "function": {
                "name": fn["name"],
                "arguments": _arguments(fn.get("arguments"), f"{where}.tool_calls.{k}")}})
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise RequestError(f"{where}.content must be text", f"{where}.content")
        out.append({**m, "content": content or "", "tool_calls": calls or None})
    return out


def rendered(messages: list[dict], fmt: ToolFormat, sampled: Mapping[str, str],
             texts: Mapping[str, str] | None = None) -> list[dict]:
    """Template-form messages (``sampled``: the text the server sampled, by tool-call id;
    ``texts``: by the visible text it returned for a reply without calls)."""
    out = []
    for m in messages:
        calls = {sampled.get(c["id"]) for c in m.get("tool_calls") or []}
        if m["role"] == "assistant" and len(calls) == 1 and None not in calls:
            out.append({"role": "assistant", "content": calls.pop()})
        elif m["role"] == "assistant" and not m.get("tool_calls") and m["content"] in (
                texts or {}):
            out.append({"role": "assistant", "content": texts[m["content"]]})
        else:
            out += as_template_messages([m], fmt.render)
    return out
