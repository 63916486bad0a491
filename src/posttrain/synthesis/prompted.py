"""A model as the tool-environment builder: it is shown the format and asked for one
environment as a JSON object, sent back its draft with the validation's reason to fix it, or
asked for a harder one; ``chat(messages) -> text`` is any chat model (``served_chat``: one
behind an OpenAI-compatible endpoint, such as ``posttrain serve``)."""

from __future__ import annotations

import json
from collections.abc import Callable

from posttrain.synthesis.scripted import BuildRequest

Chat = Callable[[list[dict]], str]
KEYS = {"env.json": "env", "db.json": "db", "tools.py": "tools", "verifier.py": "verifier",
        "solution.py": "solution"}
FORMAT = """Write one verifiable tool-use task as a JSON object with the keys:
- "env": {"id": a short name, "task": the question, "tools": [OpenAI function schemas]};
- "db": the database, {table: [rows]};
- "tools": Python source with one function NAME(db, **arguments) per tool, returning JSON;
- "verifier": Python source of verify(db, answer) -> bool, computing the right answer from db;
- "solution": Python source of solve(call) that answers using only call("TOOL", arg=value).
The verifier must accept the solution's answer and reject an empty one.
Reply with the JSON object only."""


class BuildError(ValueError):
    """A reply that holds no environment."""


def files_of(reply: str) -> dict[str, str]:
    """The environment files in a reply (its first JSON object holding the five keys)."""
    decoder, at = json.JSONDecoder(), reply.find("{")
    while at != -1:
        try:
            obj, _ = decoder.raw_decode(reply, at)
        except json.JSONDecodeError:
            at = reply.find("{", at + 1)
            continue
        if isinstance(obj, dict) and set(KEYS.values()) <= set(obj):
            return {name: obj[key] if isinstance(obj[key], str) else json.dumps(obj[key])
                    for name, key in KEYS.items()}
        at = reply.find("{", at + 1)
    raise BuildError("the reply holds no JSON object with the keys "
                     + ", ".join(KEYS.values()))


def draft_json(files: dict[str, str]) -> str:
    """A draft as the JSON object the builder wrote."""
    return json.dumps({key: files.get(name, "") for name, key in KEYS.items()})


class PromptedBuilder:
    """A ``BuildRequest`` -> files, written by ``chat`` (module docstring)."""

    def __init__(self, chat: Chat) -> None:
        self.chat = chat

    def messages(self, request: BuildRequest) -> list[dict]:
        ask = [{"role": "system", "content": FORMAT},
               {"role": "user", "content": f"Task {request.index}: write one at difficulty "
                                            f"{request.level} (1 = one lookup)."}]
        if request.previous is None and request.feedback is None:
            return ask
        draft = [] if request.previous is None else [
            {"role": "assistant", "content": draft_json(request.previous)}]
        follow = (f"That fails validation: {request.feedback}. Fix it." if request.feedback
                  else "It is valid. Write a harder one over the same kind of database.")
        return [*ask, *draft, {"role": "user", "content": follow}]

    def __call__(self, request: BuildRequest) -> dict[str, str]:
        return files_of(self.chat(self.messages(request)))


def served_chat(base_url: str, model: str | None = None, api_key: str = "synthesize",
                max_tokens: int | None = None, temperature: float = 1.0) -> Chat:
    """``chat`` through an OpenAI-compatible endpoint (its first model when none is named;
    ``max_tokens`` None: the server's default)."""
    from openai import APIStatusError, OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=1)
    name = model or client.models.list().data[0].id

    def chat(messages: list[dict]) -> str:
        try:
            reply = client.chat.completions.create(
                model=name, messages=messages, max_tokens=max_tokens, temperature=temperature)
        except APIStatusError as e:  # e.g. a conversation past the model's context window
            raise BuildError(f"the server answered {e.status_code}: {e.message}") from None
        return reply.choices[0].message.content or ""

    return chat
