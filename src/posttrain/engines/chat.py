"""Chat completion as a plain function — conversations in, one reply text each out — served by
an ``Engine`` or by an OpenAI-compatible endpoint through the official ``openai`` client. This is
how a judge (a generative reward model) is called."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.engines.base import Engine
from posttrain.models import encode_prompt
from posttrain.types import SamplingParams

Chat = Callable[[Sequence[list[dict]]], list[str]]


def engine_chat(engine: Engine, tokenizer, max_new_tokens: int = 64, temperature: float = 0.0,
                seed: int = 0) -> Chat:
    """Replies sampled by ``engine`` after the chat template's generation prompt."""
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              stop_token_ids=(tokenizer.eos_token_id,), seed=seed)

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

    client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                           timeout=timeout_s, max_retries=2)

    def reply(messages: list[dict]) -> str:
        try:
            response = client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_new_tokens,
                temperature=temperature)
        except openai.APIError:
            return ""
        return response.choices[0].message.content or "" if response.choices else ""

    return lambda conversations: [reply(list(c)) for c in conversations]
