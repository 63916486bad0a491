"""Anthropic's Messages wire format (``POST /v1/messages``): the request body into a
``Request`` (OpenAI message form inside), sampled choices into a message or its stream of
events.

Content blocks map one to one: ``text`` is text, an assistant's ``tool_use`` a tool call whose
arguments are its ``input``, a user's ``tool_result`` a ``tool`` message; ``system`` (a string
or text blocks) is the system message; a tool's ``input_schema`` its parameters. ``quick``
(posttrain's extension, as for chat completions) asks quick instructions; the message's
``quick`` holds their answers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from posttrain.serve.openai_format import check_tool, quick_field, text_of, text_only
from posttrain.serve.requests import Request, RequestError, Sampled, validated
from posttrain.serve.tool_choice import applied, from_anthropic

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class MessagesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float = Field(1.0, ge=0, le=1)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    stop_sequences: list[str] | None = None
    thinking: dict[str, Any] | None = None
    stream: bool = False
    quick: list[str] = Field(default_factory=list, max_length=16)


def _messages(body: MessagesBody) -> list[dict]:
    out = [{"role": "system", "content": text_of(body.system, "system")}] if body.system else []
    for i, m in enumerate(body.messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant"):
            raise RequestError(f"messages.{i}.role must be user or assistant", f"messages.{i}.role")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise RequestError(f"messages.{i}.content must be a string or a list of content "
                               "blocks", f"messages.{i}.content")
        text_only(blocks, f"messages.{i}.content")
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        if role == "assistant":
            calls = [{"id": b["id"], "type": "function", "function": {
                "name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                for b in blocks if b.get("type") == "tool_use"]
            out.append({"role": "assistant", "content": text, "tool_calls": calls or None})
            continue
        out += [{"role": "tool", "tool_call_id": b.get("tool_use_id"),
                 "content": text_of(b.get("content"), f"messages.{i}.content")}
                for b in blocks if b.get("type") == "tool_result"]
        if text or not any(b.get("type") == "tool_result" for b in blocks):
            out.append({"role": "user", "content": text})
    return out


def parse_messages(body: dict) -> tuple[MessagesBody, Request]:
    msg = validated(MessagesBody, body)
    if (msg.thinking or {}).get("type", "disabled") != "disabled":
        raise RequestError("thinking is not supported: the model's reasoning is part of its "
                           "text (its <think>...</think>, where its template has one)", "thinking")
    tools, force = applied(from_anthropic(msg.tool_choice), [check_tool({
        "type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {"type": "object"})}}, i, "input_schema")
        for i, t in enumerate(msg.tools or [])] or None)
    return msg, Request(_messages(msg), tools, 1, msg.temperature, msg.top_p, msg.max_tokens,
                        list(msg.stop_sequences or []), force_tool=force, top_k=msg.top_k,
                        quick=list(dict.fromkeys(msg.quick)))


def _blocks(s: Sampled) -> list[dict]:
    text = [{"type": "text", "text": s.text}] if s.text or not s.tool_calls else []
    return text + [{"type": "tool_use", "id": c.call_id, "name": c.name,
                    "input": c.arguments} for c in s.tool_calls]


def message_response(msg: MessagesBody, s: Sampled, prompt_tokens: int) -> dict:
    reason = "stop_sequence" if s.stop_sequence else STOP_REASONS[s.finish_reason]
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": msg.model, "content": _blocks(s), "stop_reason": reason,
            "stop_sequence": s.stop_sequence,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": len(s.token_ids)}
            } | quick_field([s])


def message_events(msg: MessagesBody, s: Sampled, prompt_tokens: int) -> Iterator[str]:
    """The message as Anthropic's stream: ``message_start``, per block a start, its deltas
    (text, or the tool input as JSON) and a stop, ``message_delta`` with the stop reason,
    ``message_stop``."""
    def event(kind: str, data: dict) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    whole = message_response(msg, s, prompt_tokens)
    yield event("message_start", {"message": {**whole, "content": [], "stop_reason": None,
                                              "stop_sequence": None,
                                              "usage": {**whole["usage"], "output_tokens": 0}}})
    for i, block in enumerate(whole["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event("content_block_start", {"index": i, "content_block": start})
        yield event("content_block_delta", {"index": i, "delta": delta})
        yield event("content_block_stop", {"index": i})
    yield event("message_delta", {"delta": {"stop_reason": whole["stop_reason"],
                                            "stop_sequence": whole["stop_sequence"]},
                                  "usage": {"output_tokens": whole["usage"]["output_tokens"]}})
    yield event("message_stop", {})


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
               529: "overloaded_error"}


def error_body(status: int, message: str) -> dict:
    """Anthropic's error body for ``status``; a status its table lacks (405, 422, ...) is
    ``invalid_request_error`` below 500 and ``api_error`` from 500."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
