"""Parse tool calls out of a model's text.

The default format is Hermes/Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
any number of them (parallel calls). A call that is not valid JSON, or lacks a name, becomes a
``ToolCall`` with ``error`` set: the loop answers it with an error observation, never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

HERMES_PATTERN = r"<tool_call>\s*(.*?)\s*</tool_call>"


@dataclass
class ToolCall:
    """One requested call, in order of appearance; ``call_id`` is ``call_<index>``."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""
    raw: str = ""
    error: str | None = None


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes text of one call: what ``parse_tool_calls`` reads back."""
    return "<tool_call>%s</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def strip_tool_calls(text: str, pattern: str = HERMES_PATTERN) -> str:
    """``text`` without its calls (``pattern``'s whole matches)."""
    return re.sub(pattern, "", text, flags=re.DOTALL)


def parse_tool_calls(text: str, pattern: str = HERMES_PATTERN) -> list[ToolCall]:
    """Every call in ``text``; ``pattern``'s first group holds the JSON payload."""
    calls = []
    for i, m in enumerate(re.finditer(pattern, text or "", re.DOTALL)):
        raw, call_id = m.group(1), f"call_{i}"
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as e:
            calls.append(ToolCall(None, {}, call_id, raw, f"malformed tool call JSON: {e.msg}"))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            calls.append(ToolCall(None, {}, call_id, raw, "a tool call needs a string 'name'"))
            continue
        args = payload.get("arguments", {})
        if isinstance(args, str):  # some templates emit arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = None
        if not isinstance(args, dict):
            calls.append(ToolCall(payload["name"], {}, call_id, raw,
                                  "tool call 'arguments' must be a JSON object"))
            continue
        calls.append(ToolCall(payload["name"], args, call_id, raw))
    return calls
