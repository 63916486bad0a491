"""OpenAI's Responses wire format (``POST /v1/responses``): input items into a ``Request``
(chat messages inside), a sampled choice into a response or its stream of events.

Input items map to messages: a message item (``role``, text or ``input_text`` /
``output_text`` parts) is that message, a ``function_call`` an assistant tool call, a
``function_call_output`` a ``tool`` message; ``instructions`` is the system message; with
``previous_response_id`` the stored conversation of that response comes first. A tool is
``{"type": "function", "name", "parameters"}``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from posttrain.serve.openai_format import check_tool, text_of, tool_calls
from posttrain.serve.requests import Request, RequestError, Sampled, validated
from posttrain.serve.tool_choice import applied, from_responses


class ResponsesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_output_tokens: int | None = Field(None, ge=1)
    previous_response_id: str | None = None
    stream: bool = False


class Conversations:
    """The conversation each response ended, by session and response id (the newest
    ``capacity``): a session continues only its own responses."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], list[dict]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, session: str, response_id: str, messages: list[dict]) -> None:
        with self._lock:
            self._items[session, response_id] = messages
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, session: str, response_id: str) -> list[dict]:
        with self._lock:
            if (session, response_id) not in self._items:
                raise RequestError(f"no stored response {response_id!r} in this session",
                                   "previous_response_id")
            return list(self._items[session, response_id])


def _items(items: str | list[dict]) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise RequestError(f"input.{i}.role must be user, assistant, system or "
                                   "developer", f"input.{i}.role")
            out.append({"role": "system" if role == "developer" else role,
                        "content": text_of(item.get("content"), f"input.{i}.content")})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name"), "arguments": item.get("arguments", "{}")}}
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1]["tool_calls"] = [*(out[-1].get("tool_calls") or []), call]
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str)
                        else text_of(output, f"input.{i}.output")})
        elif kind != "reasoning":
            raise RequestError(f"input.{i}.type {kind!r} is not supported (message, "
                               "function_call, function_call_output)", f"input.{i}.type")
    return out


def parse_responses(body: dict, stored: Conversations, session: str
                    ) -> tuple[ResponsesBody, Request]:
    """The request; with ``previous_response_id``, after that response's conversation, whose
    instructions this request's replace (they do not carry over)."""
    rb = validated(ResponsesBody, body)
    earlier = stored.get(session, rb.previous_response_id) if rb.previous_response_id else []
    system = [{"role": "system", "content": rb.instructions}] if rb.instructions else []
    messages = [*system, *(m for m in earlier if m["role"] != "system"), *_items(rb.input)]
    tools, force = applied(from_responses(rb.tool_choice), [check_tool({
        "type": "function", "function": {
            k: v for k, v in t.items() if k in ("name", "description", "parameters")}}, i,
        "parameters") for i, t in enumerate(rb.tools or [])] or None)
    return rb, Request(messages, tools, 1, rb.temperature, rb.top_p, rb.max_output_tokens,
                       force_tool=force)


def output_items(s: Sampled) -> list[dict]:
    text = [{"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed",
             "role": "assistant", "content": [{"type": "output_text", "text": s.text,
                                               "annotations": [], "logprobs": []}]}
            ] if s.text or not s.tool_calls else []
    return text + [{"type": "function_call", "id": f"fc_{uuid.uuid4().hex}",
                    "call_id": c.call_id, "name": c.name,
                    "arguments": json.dumps(c.arguments), "status": "completed"}
                   for c in s.tool_calls]


def response_body(rb: ResponsesBody, s: Sampled, prompt_tokens: int, response_id: str) -> dict:
    incomplete = s.finish_reason == "length"
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed", "model": rb.model,
        "output": output_items(s), "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": rb.instructions, "metadata": {}, "parallel_tool_calls": True,
        "temperature": rb.temperature, "top_p": rb.top_p, "tool_choice": rb.tool_choice or "auto",
        "tools": rb.tools or [], "previous_response_id": rb.previous_response_id,
        "max_output_tokens": rb.max_output_tokens,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": len(s.token_ids),
                  "total_tokens": prompt_tokens + len(s.token_ids),
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}}


def conversation_after(messages: list[dict], s: Sampled) -> list[dict]:
    """``messages`` and the response's assistant message (for ``previous_response_id``)."""
    return [*messages, {"role": "assistant", "content": s.text, "tool_calls": tool_calls(s)}]


def response_events(whole: dict) -> Iterator[str]:
    """The response as the Responses stream: created, per output item added / its deltas /
    done, completed; every event numbered."""
    number = iter(range(1 << 30))

    def event(kind: str, data: dict) -> str:
        return (f"event: {kind}\ndata: "
                f"{json.dumps({'type': kind, 'sequence_number': next(number), **data})}\n\n")

    start = {**whole, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", {"response": start})
    for i, item in enumerate(whole["output"]):
        if item["type"] == "message":
            yield event("response.output_item.added", {"output_index": i, "item": {
                **item, "status": "in_progress", "content": []}})
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": i, "content_index": 0}
            yield event("response.content_part.added", {**where, "part": {**part, "text": ""}})
            yield event("response.output_text.delta", {**where, "delta": part["text"],
                                                       "logprobs": []})
            yield event("response.output_text.done", {**where, "text": part["text"],
                                                      "logprobs": []})
            yield event("response.content_part.done", {**where, "part": part})
        else:
            yield event("response.output_item.added", {"output_index": i, "item": {
                **item, "status": "in_progress", "arguments": ""}})
            where = {"item_id": item["id"], "output_index": i}
            yield event("response.function_call_arguments.delta", {
                **where, "delta": item["arguments"]})
            yield event("response.function_call_arguments.done", {
                **where, "arguments": item["arguments"], "name": item["name"]})
        yield event("response.output_item.done", {"output_index": i, "item": item})
    yield event("response.completed", {"response": whole})
