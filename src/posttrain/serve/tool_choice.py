"""``tool_choice`` of the three APIs as one value, honoured by the completion: ``None`` (the
model decides), ``ANY_TOOL`` (the reply must call a tool) or a tool's name (the reply calls
that one); ``none`` hides the tools. A forced call is made by opening it for the model (the
format's call text up to the name, or up to the arguments: ``tool_formats.call_opening``)
and letting it continue: what it samples is its own, the opening is prompt.

    OpenAI chat   "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
    Responses     "auto" | "none" | "required" | {"type": "function", "name"}
    Anthropic     {"type": "auto" | "none" | "any"} | {"type": "tool", "name"}

Anything else, ``required`` without tools, or a name that is not among the tools, is a
``RequestError`` naming ``tool_choice``.
"""

from __future__ import annotations

from typing import Any

from posttrain.serve.requests import RequestError

ANY_TOOL = "*"


def _bad(value: Any, forms: str) -> RequestError:
    return RequestError(f"tool_choice {value!r} is not {forms}", "tool_choice")


def from_chat(value: Any) -> str:
    """OpenAI chat's choice as ``auto``, ``none``, ``required`` or ``function:NAME`` (so
    are the other two's)."""
    if value is None or value in ("auto", "none", "required"):
        return value or "auto"
    fn = value.get("function") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(fn, dict) \
            and isinstance(fn.get("name"), str):
        return f"function:{fn['name']}"
    raise _bad(value, 'auto, none, required or {"type": "function", "function": {"name": ...}}')


def from_responses(value: Any) -> str:
    if value is None or value in ("auto", "none", "required"):
        return value or "auto"
    if isinstance(value, dict) and value.get("type") == "function" \
            and isinstance(value.get("name"), str):
        return f"function:{value['name']}"
    raise _bad(value, 'auto, none, required or {"type": "function", "name": ...}')


def from_anthropic(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    if value is None or kind in ("auto", "none", "any"):
        return {None: "auto", "any": "required"}.get(kind, kind)
    if kind == "tool" and isinstance(value.get("name"), str):
        return f"function:{value['name']}"
    raise _bad(value, '{"type": "auto" | "none" | "any"} or {"type": "tool", "name": ...}')


def applied(choice: str, tools: list[dict] | None) -> tuple[list[dict] | None, str | None]:
    """``(the tools shown, the call forced)`` of a normalised ``choice``."""
    if choice == "none":
        return None, None
    if choice == "auto":
        return tools, None
    names = [t["function"]["name"] for t in tools or []]
    if not names:
        raise RequestError(f"tool_choice {choice!r} needs tools", "tool_choice")
    if choice == "required":
        return tools, ANY_TOOL
    name = choice.removeprefix("function:")
    if name not in names:
        raise RequestError(f"tool_choice names the tool {name!r}, which is not among the "
                           f"request's tools ({', '.join(names)})", "tool_choice")
    return tools, name
