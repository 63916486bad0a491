"""Tool-call text formats of model families: how a model writes a call, and so how the server
reads calls out of a completion and writes a client's calls back into the template.

- ``hermes`` (Qwen2.5, Hermes, most templates): ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, any number of them.
- ``qwen3_coder`` (Qwen3-Coder): ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n
  </parameter>...</function>\\n</tool_call>``; a value is the text itself where the tool's
  schema types the parameter as a string, else JSON when it parses as JSON (a number, a
  boolean, an object...).
- ``llama3_json`` (Llama 3.x): the whole reply is one JSON object ``{"name": ...,
  "parameters": {...}}``, optionally after ``<|python_tag|>``.

A call that cannot be read is a ``ToolCall`` with ``error`` set (the server then returns the
text as it is).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain.engines.chat import hermes_call
from posttrain.harness.tool_calls import ToolCall, parse_tool_calls, strip_tool_calls

QWEN3_CALL = r"<tool_call>\s*<function=([^>\s]+)>(.*?)</function>\s*</tool_call>"
QWEN3_PARAMETER = r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>"


@dataclass(frozen=True)
class ToolFormat:
    name: str
    parse: Callable[[str, list[dict] | None], list[ToolCall]]  # (text, the request's tools)
    strip: Callable[[str], str]  # the text without its calls
    render: Callable[[str, str], str]  # (name, arguments as JSON text) -> the call's text


def _value(text: str, schema: dict) -> Any:
    if schema.get("type") == "string":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _properties(tools: list[dict] | None, name: str) -> dict:
    """The parameter schemas of tool ``name`` among ``tools`` (empty when unknown)."""
    for tool in tools or []:
        fn = tool.get("function", tool)
        if fn.get("name") == name:
            return (fn.get("parameters") or {}).get("properties") or {}
    return {}


def _qwen3_parse(text: str, tools: list[dict] | None = None) -> list[ToolCall]:
    calls = []
    for i, m in enumerate(re.finditer(QWEN3_CALL, text, re.DOTALL)):
        schemas = _properties(tools, m.group(1))
        calls.append(ToolCall(m.group(1), {k: _value(v, schemas.get(k, {})) for k, v in
                                           re.findall(QWEN3_PARAMETER, m.group(2), re.DOTALL)},
                              f"call_{i}", m.group(0)))
    if not calls and "<tool_call>" in text:
        calls = [ToolCall(None, {}, "call_0", text, "a <tool_call> without a readable "
                                                     "<function=...>...</function>")]
    return calls


def _qwen3_render(name: str, arguments: str) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n"
                     "</parameter>\n" for k, v in json.loads(arguments or "{}").items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _llama_payload(text: str) -> str:
    return text.strip().removeprefix("<|python_tag|>").strip()


def _llama_parse(text: str, tools: list[dict] | None = None) -> list[ToolCall]:
    payload = _llama_payload(text)
    if not payload.startswith("{"):
        return []
    try:
        call = json.loads(payload)
    except json.JSONDecodeError as e:
        return [ToolCall(None, {}, "call_0", payload, f"malformed tool call JSON: {e.msg}")]
    args = call.get("parameters", call.get("arguments")) if isinstance(call, dict) else None
    if not isinstance(args, dict) or not isinstance(call.get("name"), str):
        return [ToolCall(None, {}, "call_0", payload,
                         'a call is {"name": "...", "parameters": {...}}')]
    return [ToolCall(call["name"], args, "call_0", payload)]


def _llama_render(name: str, arguments: str) -> str:
    return '{"name": %s, "parameters": %s}' % (json.dumps(name), arguments)


FORMATS = {
    "hermes": ToolFormat("hermes", lambda text, tools=None: parse_tool_calls(text),
                         strip_tool_calls, hermes_call),
    "qwen3_coder": ToolFormat("qwen3_coder", _qwen3_parse,
                              lambda t: strip_tool_calls(t, QWEN3_CALL), _qwen3_render),
    "llama3_json": ToolFormat("llama3_json", _llama_parse,
                              lambda t: "" if _llama_parse(t) else t, _llama_render),
}


def call_opening(fmt: ToolFormat, name: str | None) -> str:
    """The text every call of ``fmt`` begins with, up to its name (``name`` None) or, for
    tool ``name``, up to its arguments: what two calls' texts share."""
    if name is None:
        return os.path.commonprefix([fmt.render("a", "{}"), fmt.render("b", "{}")])
    return os.path.commonprefix([fmt.render(name, "{}"), fmt.render(name, '{"a": 1}')])


def detect(tokenizer) -> ToolFormat:
    """The format a chat template writes calls in (``hermes`` when it shows none)."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    if "<function=" in template:
        return FORMATS["qwen3_coder"]
    if "<|python_tag|>" in template or '"parameters"' in template:
        return FORMATS["llama3_json"]
    return FORMATS["hermes"]
