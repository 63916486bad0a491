"""Chat completion as a plain function — conversations in, one reply text each out — served by
an ``Engine`` or by an OpenAI-compatible endpoint through the official ``openai`` client. This is
how a judge (a generative reward model) is called. ``*_tool_chat`` are the one-conversation
variants with tools, in OpenAI's message format (how a simulated user is played)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from posttrain.engines.base import Engine
from posttrain.models import encode_prompt, stop_tokens
from posttrain.types import SamplingParams

Chat = Callable[[Sequence[list[dict]]], list[str]]


def engine_chat(engine: Engine, tokenizer, max_new_tokens: int = 64, temperature: float = 0.0,
                seed: int = 0) -> Chat:
    """Replies sampled by ``engine`` after the chat template's generation prompt."""
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              stop_token_ids=stop_tokens(tokenizer), seed=seed)

    def chat(conversations: Sequence[list[dict]]) -> list[str]:
        if not conversations:
            return []
        outs = engine.generate([encode_prompt(tokenizer, c) for c in conversations], sampling)
        return [tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in outs]

    return chat


def openai_chat(base_url: str, model: str, api_key: str | None = None,
                max_new_tokens: int = 64, temperature: float = 0.0,
                timeout_s: float = 60.0) -> Chat:
    """Replies from the ``chat.completions`` endpoint at ``base_url`` (``.../v1``). A request
    that still fails after the client's retries answers ``""`` — which no judge can parse, so
    the sample's judged part is marked missing rather than the run stopped."""
    import openai

    client = _client(base_url, api_key, timeout_s)

    def reply(messages: list[dict]) -> str:
        try:
            response = client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_new_tokens,
                temperature=temperature)
        except openai.APIError:
            return ""
        return response.choices[0].message.content or "" if response.choices else ""

    return lambda conversations: [reply(list(c)) for c in conversations]


def _client(base_url: str, api_key: str | None, timeout_s: float):
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                         timeout=timeout_s, max_retries=2)


ToolChat = Callable[[list[dict], "list[dict] | None"], dict]


def hermes_call(name: str, arguments: str) -> str:
    """One call in the Hermes format (``arguments``: JSON text)."""
    return '<tool_call>{"name": %s, "arguments": %s}</tool_call>' % (json.dumps(name),
                                                                     arguments)


def as_template_messages(messages: Sequence[dict],
                         render_call: Callable[[str, str], str] = hermes_call) -> list[dict]:
    """OpenAI-format messages for a text-only chat template: an assistant turn's calls become
    their text (``render_call(name, arguments)``: Hermes ``<tool_call>`` blocks by default)
    after its content, a tool result a plain ``tool`` turn."""
    out = []
    for m in messages:
        calls = "".join(render_call(c["function"]["name"], c["function"]["arguments"])
                        for c in m.get("tool_calls") or [])
        out.append({"role": m["role"], "content": (m.get("content") or "") + calls})
    return out


def engine_tool_chat(engine: Engine, tokenizer, max_new_tokens: int = 256,
                     temperature: float = 0.0, seed: int = 0) -> ToolChat:
    """One reply sampled by ``engine``; tool calls stay in the text (the caller parses them)."""
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              stop_token_ids=stop_tokens(tokenizer), seed=seed)

    def chat(messages: list[dict], tools: list[dict] | None) -> dict:
        ids = encode_prompt(tokenizer, as_template_messages(messages), tools=tools)
        (out,) = engine.generate([ids], sampling)
        return {"content": tokenizer.decode(out.token_ids, skip_special_tokens=True),
                "tool_calls": None}

    return chat


def openai_tool_chat(base_url: str, model: str, api_key: str | None = None,
                     max_new_tokens: int = 256, temperature: float = 0.0,
                     timeout_s: float = 60.0) -> ToolChat:
    """One reply from the endpoint's ``chat.completions`` with ``tools``; its structured calls
    as ``{"name", "arguments"}``. A failed request raises (an infrastructure error for the
    caller: a conversation cannot go on without its user). Arguments that are not JSON stay
    the raw string, for the caller to refuse."""
    client = _client(base_url, api_key, timeout_s)

    def chat(messages: list[dict], tools: list[dict] | None) -> dict:
        response = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_new_tokens, temperature=temperature,
            **({"tools": tools} if tools else {}))
        message = response.choices[0].message
        calls = [{"name": c.function.name, "arguments": _arguments(c.function.arguments)}
                 for c in message.tool_calls or []]
        return {"content": message.content, "tool_calls": calls or None}

    return chat


def _arguments(raw: str | None):
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return raw
