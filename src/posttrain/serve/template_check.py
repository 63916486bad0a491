"""``posttrain template check``: which conversation constructs keep a chat template
prefix-stable, so that ``posttrain serve`` can bridge a session's turns into one segment.

For each construct, a conversation is rendered up to the generation prompt, the assistant's
reply is taken as the model would sample it (its canonical tokens, then eos), and the next
request (the reply as a client sends it back, then a user or tool message) is rendered as the
server renders requests. The construct bridges when the second rendering starts with the first
one plus the sampled tokens, token for token; otherwise the report says where they part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from posttrain.engines.chat import as_template_messages
from posttrain.models import encode_prompt
from posttrain.serve.bridge import first_difference

USER = {"role": "user", "content": "What is 2+3?"}
CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]


@dataclass(frozen=True)
class Construct:
    """``before`` + the sampled ``reply`` text; the client sends back ``sent`` (an assistant
    message in OpenAI form) and then ``after``."""

    name: str
    before: tuple[dict, ...]
    reply: str
    sent: dict
    after: dict
    tools: tuple[dict, ...] = ()


def _call(arguments: str) -> dict:
    """An assistant message with one ``add`` call, as an OpenAI client sends it back."""
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": arguments}}]}


CONSTRUCTS = (
    Construct("plain turns", (USER,), "It is 5.", {"role": "assistant", "content": "It is 5."},
              {"role": "user", "content": "And 3+3?"}),
    Construct("system prompt", ({"role": "system", "content": "Be brief."}, USER), "5.",
              {"role": "assistant", "content": "5."}, {"role": "user", "content": "Sure?"}),
    Construct("tool call and result", (USER,), CALL_TEXT,
              _call(json.dumps({"a": 2, "b": 3})),
              {"role": "tool", "tool_call_id": "call_0", "content": "5"}, tuple(TOOLS)),
    Construct("reasoning block", (USER,), "<think>2 plus 3 is 5.</think>It is 5.",
              {"role": "assistant", "content": "<think>2 plus 3 is 5.</think>It is 5."},
              {"role": "user", "content": "And 3+3?"}),
    Construct("JSON booleans and numbers", (USER,),
              '<tool_call>{"name": "add", "arguments": {"a": 2.50, "b": 3, "exact": true}}'
              '</tool_call>',
              # a client parses the arguments and serialises them again
              _call(json.dumps({"a": 2.5, "b": 3, "exact": True})),
              {"role": "tool", "tool_call_id": "call_0", "content": "5.5"}, tuple(TOOLS)),
)


@dataclass
class Verdict:
    name: str
    bridges: bool
    detail: str  # where the renderings part, in text


def check_construct(tokenizer, c: Construct) -> Verdict:
    tools = list(c.tools) or None
    prompt = encode_prompt(tokenizer, as_template_messages(c.before), tools=tools)
    sampled = prompt + tokenizer.encode(c.reply, add_special_tokens=False) + \
        [tokenizer.eos_token_id]
    following = encode_prompt(tokenizer, as_template_messages([*c.before, c.sent, c.after]),
                              tools=tools)
    at = first_difference(sampled, following)
    if at == len(sampled):
        return Verdict(c.name, True, "")
    return Verdict(c.name, False, f"token {at}: sampled {tokenizer.decode(sampled[at:at + 8])!r}"
                                  f", re-rendered {tokenizer.decode(following[at:at + 8])!r}")


def check_template(tokenizer) -> list[Verdict]:
    return [check_construct(tokenizer, c) for c in CONSTRUCTS]
