"""The simulated user (TAU_ENV.md §8): an LLM — any chat function, so an ``Engine`` or an
OpenAI-compatible endpoint — playing the customer of a task's scenario, with the role flip:
to the LLM its own messages are ``assistant`` turns, the agent's texts ``user`` turns."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from posttrain.harness import parse_tool_calls, strip_tool_calls

# messages (OpenAI format, role-flipped) and the tools offered -> {"content", "tool_calls"};
# the shape of ``engines.chat.ToolChat`` (environments do not import engines)
ToolChat = Callable[[list[dict], list[dict] | None], dict]
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")

GUIDELINES = """You play a customer contacting customer service, following the scenario below.
- Write one message at a time, in your own words; never repeat the scenario verbatim.
- Follow the scenario strictly. Invent nothing it does not give you; if you are asked for
  something you do not know, say so.
- Reveal information only when the agent asks for it.
- When your goal is reached, write ###STOP### as your whole message.
- If the agent transfers you to a human agent, write ###TRANSFER###.
- If the scenario does not tell you what to do next, write ###OUT-OF-SCOPE###."""

TOOL_GUIDELINES = """
You have tools that act on your own phone or account. A turn is either a message or one tool
call, never both. Act only when the agent asks you to, one action at a time, and answer from
the tool's result, never from memory. After a tool error, try again. The agent does not see
your tool calls, only what you tell it. Write ###TRANSFER### only after the agent has clearly
transferred you."""


def user_system_prompt(scenario: str, with_tools: bool) -> str:
    return (GUIDELINES + (TOOL_GUIDELINES if with_tools else "")
            + f"\n\n<scenario>\n{scenario}\n</scenario>")


def stop_token(text: str | None) -> str | None:
    return next((t for t in STOP_TOKENS if t in (text or "")), None)


class UserSimulator(Protocol):
    def respond(self, view: Sequence[dict]) -> dict:
        """The user's next message (``{"role": "user", "content", "tool_calls"}``) given what
        the user sees of the trajectory (§7.3)."""
        ...


def role_flip(view: Sequence[dict]) -> list[dict]:
    """The user's view as the LLM's conversation: its own messages as ``assistant`` (with
    their calls), the agent's texts as ``user``, its tool results as ``tool``."""
    out = []
    for m in view:
        if m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["id"], "content": m["content"]})
        elif m["role"] == "user":
            calls = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for c in m.get("tool_calls") or []]
            out.append({"role": "assistant", "content": m.get("content") or "",
                        **({"tool_calls": calls} if calls else {})})
        else:
            out.append({"role": "user", "content": m["content"]})
    return out


class LLMUser:
    """``chat`` plays the user of ``scenario``; ``tools`` (schemas) are the user tools
    offered. A reply without structured calls is searched for Hermes ``<tool_call>`` blocks
    (how a local model writes them); calls get ``requestor = "user"``."""

    def __init__(self, chat: ToolChat, scenario: str, tools: list[dict] | None = None) -> None:
        self.chat, self.tools = chat, tools or None
        self.system = user_system_prompt(scenario, bool(tools))
        self.turn = 0

    def respond(self, view: Sequence[dict]) -> dict:
        reply = self.chat([{"role": "system", "content": self.system}, *role_flip(view)],
                          self.tools)
        content, calls = reply.get("content"), reply.get("tool_calls")
        if calls is None and self.tools and (parsed := parse_tool_calls(content or "")):
            calls = [{"name": c.name, "arguments": c.arguments, "malformed": c.error}
                     for c in parsed]
            content = strip_tool_calls(content).strip() or None
        self.turn += 1
        return user_message(content, calls, f"u{self.turn}")


def user_message(content: str | None, calls: list[dict[str, Any]] | None,
                 prefix: str) -> dict:
    """A user message; its calls get ids ``<prefix>_<k>`` and the user as requestor. A call
    without a string name or with arguments that are not an object is kept as ``malformed``
    (no name: nothing to run, replay or match)."""
    return {"role": "user", "content": content,
            "tool_calls": [_call(c, f"{prefix}_{k}") for k, c in enumerate(calls)]
            if calls else None}


def _call(call: dict[str, Any], call_id: str) -> dict:
    arguments = {} if call.get("arguments") is None else call["arguments"]
    problem = call.get("malformed") or (
        None if isinstance(call.get("name"), str) and isinstance(arguments, dict)
        else "a tool call needs a string name and an object of arguments")
    if problem:
        return {"id": call_id, "name": None, "arguments": {}, "requestor": "user",
                "malformed": problem}
    return {"id": call_id, "name": call["name"], "arguments": arguments, "requestor": "user"}
