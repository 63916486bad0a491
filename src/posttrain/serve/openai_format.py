"""OpenAI's ``chat.completions`` wire format: the request body into a ``Request``, sampled
choices into a response or a stream of chunks (server-sent events)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posttrain.serve.requests import Request, RequestError, Sampled, validated
from posttrain.serve.tool_choice import applied, from_chat


class ChatBody(BaseModel):
    """The fields posttrain reads; others (``user``, ``metadata``, ...) are accepted and
    ignored. ``quick`` (posttrain's extension): quick-instruction tokens to answer after the
    prompt; the response's ``quick`` holds the answers."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    n: int = Field(1, ge=1, le=64)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    quick: list[str] = Field(default_factory=list, max_length=16)


def parse_chat(body: dict) -> tuple[ChatBody, Request]:
    chat = validated(ChatBody, body)
    for i, m in enumerate(chat.messages):
        if m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise RequestError(f"messages[{i}].role must be system, developer, user, "
                               "assistant or tool", f"messages.{i}.role")
    if chat.top_logprobs:
        raise RequestError("top_logprobs is not supported: the engine gives the sampled "
                           "tokens' log-probs only (logprobs: true)", "top_logprobs")
    tools, force = applied(from_chat(chat.tool_choice),
                           [check_tool(t, i) for i, t in enumerate(chat.tools or [])] or None)
    messages = [{**m, "role": "system" if m["role"] == "developer" else m["role"],
                 "content": text_of(m.get("content"), f"messages.{i}.content")}
                for i, m in enumerate(chat.messages)]
    stop = [chat.stop] if isinstance(chat.stop, str) else list(chat.stop or [])
    return chat, Request(messages, tools, chat.n, chat.temperature, chat.top_p,
                         chat.max_completion_tokens or chat.max_tokens, stop, chat.seed, force,
                         list(dict.fromkeys(chat.quick)))


MEDIA_PARTS = ("image", "image_url", "input_image", "input_audio", "input_file", "file",
               "document", "audio")


def text_only(parts: list, where: str) -> None:
    """A ``RequestError`` for an image, audio or file part: the served model reads text."""
    for p in parts:
        if isinstance(p, dict) and p.get("type") in MEDIA_PARTS:
            raise RequestError(f"{where}: a content part of type {p['type']!r} is not supported "
                               "(this server serves a text-only model)", where)


def text_of(content: Any, where: str = "messages") -> str:
    """Content as text, whatever the API: a string, or a list of parts (OpenAI's content
    parts, the Responses API's ``input_text`` / ``output_text``, Anthropic's blocks) whose
    ``text`` is joined; none is empty. An image, audio or file part, or anything else, is a
    ``RequestError`` naming ``where``."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        text_only(content, where)
        return "".join(p["text"] for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise RequestError(f"{where} must be a string or a list of content parts", where)


def check_tool(tool: dict, i: int, schema_field: str = "function.parameters") -> dict:
    """A function tool whose ``parameters`` are valid JSON Schema; an error names the
    schema as the client sent it (``schema_field`` of ``tools[i]``)."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    fn = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestError(f"tools[{i}] must be a function tool with a name", f"tools.{i}")
    schema = fn.get("parameters", {"type": "object"})
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise RequestError(f"tools[{i}].{schema_field} is not valid JSON Schema: "
                           f"{exc.message}", f"tools.{i}.{schema_field}") from None
    return {"type": "function", "function": fn}


def tool_calls(s: Sampled) -> list[dict] | None:
    """``s``'s calls in OpenAI's message form (None without)."""
    return [{"id": c.call_id, "type": "function", "function": {
        "name": c.name, "arguments": json.dumps(c.arguments)}} for c in s.tool_calls] or None


def _logprobs(s: Sampled, tokenizer) -> dict:
    return {"content": [{"token": tokenizer.decode([t]), "logprob": lp,
                         "bytes": list(tokenizer.decode([t]).encode()), "top_logprobs": []}
                        for t, lp in zip(s.token_ids, s.logprobs)]}


def usage(prompt_tokens: int, sampled: list[Sampled]) -> dict:
    completion = sum(len(s.token_ids) for s in sampled)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}


def completion_response(chat: ChatBody, sampled: list[Sampled], prompt_tokens: int,
                        tokenizer) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": chat.model,
        "choices": [{"index": i, "finish_reason": s.finish_reason,
                     "message": {"role": "assistant",
                                 "content": (s.text or None) if s.tool_calls else s.text,
                                 "tool_calls": tool_calls(s)},
                     "logprobs": _logprobs(s, tokenizer) if chat.logprobs else None}
                    for i, s in enumerate(sampled)],
        "usage": usage(prompt_tokens, sampled)} | quick_field(sampled)


def quick_field(sampled: list[Sampled]) -> dict:
    """The response's ``quick`` (its answers), for a request that asked some."""
    return {"quick": sampled[0].quick.to_dict()} if sampled and sampled[0].quick else {}


def completion_chunks(chat: ChatBody, sampled: list[Sampled], prompt_tokens: int,
                      tokenizer) -> Iterator[str]:
    """The response as server-sent events: per choice a role chunk, one chunk per sampled
    token's text, its tool calls, its finish reason; ``[DONE]`` last."""
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": chat.model}

    def event(index: int, delta: dict, finish: str | None = None,
              logprobs: dict | None = None) -> str:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    for i, s in enumerate(sampled):
        yield event(i, {"role": "assistant", "content": ""})
        for piece in _pieces(s.text, tokenizer, s):
            yield event(i, {"content": piece})
        for k, call in enumerate(tool_calls(s) or []):
            yield event(i, {"tool_calls": [{"index": k, **call}]})
        yield event(i, {}, s.finish_reason, _logprobs(s, tokenizer) if chat.logprobs else None)
    if (chat.stream_options or {}).get("include_usage") or chat.quick:
        last = {**base, "choices": [], "usage": usage(prompt_tokens, sampled)}
        yield f"data: {json.dumps(last | quick_field(sampled))}\n\n"
    yield "data: [DONE]\n\n"


def _pieces(text: str, tokenizer, s: Sampled) -> list[str]:
    """``text`` cut where the sampled tokens' decodings end (whole text when they do not
    line up, as after a stop string or a removed tool call)."""
    pieces, at = [], 0
    for t in s.token_ids:
        piece = tokenizer.decode([t], skip_special_tokens=True)
        if not piece or not text.startswith(piece, at):
            break
        pieces.append(piece)
        at += len(piece)
    return pieces + ([text[at:]] if at < len(text) else [])


ErrorType = Literal["invalid_request_error", "not_found_error", "authentication_error",
                    "server_error"]


def error_body(message: str, kind: ErrorType = "invalid_request_error",
               param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
