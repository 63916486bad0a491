"""Executing a tau-bench tool call (TAU_ENV.md §1.1-1.2): look the tool up in the requestor's
toolkit, call it with the JSON arguments as keyword arguments (no coercion, no schema check),
run the sync hook, and turn the result or the failure into the tool message's content.
Changes made before a failure stay (no rollback)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

READ, WRITE, GENERIC = "read", "write", "generic"


class DomainError(ValueError):
    """A domain rule refused the call; its message is what the model reads."""


def transfer_to_human_agents(summary: str) -> str:
    """Hand the conversation over to a human agent, when the request cannot be handled with the
    available tools or is outside the policy.

    Args:
        summary: A short summary of the customer's issue for the human agent.

    Returns:
        A confirmation that the transfer was made.
    """
    return "Transfer successful"


@dataclass
class ToolSpec:
    fn: Callable[..., Any]
    kind: Literal["read", "write", "generic"]

    @property
    def mutates_state(self) -> bool:
        return self.kind == WRITE


@dataclass
class Toolkit:
    """``tools`` offered to the agent (or the simulated user); ``helpers`` only for a task's
    initialisation actions and assertions."""

    tools: dict[str, ToolSpec]
    helpers: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, obj: Any, kinds: Sequence[tuple[str, Sequence[str]]],
           helpers: Sequence[str] = ()) -> Toolkit:
        """The methods of ``obj`` named in ``kinds`` (``(kind, names)`` groups, in order) as
        tools, those named in ``helpers`` as helpers."""
        return cls({n: ToolSpec(getattr(obj, n), kind) for kind, names in kinds for n in names},
                   {n: getattr(obj, n) for n in helpers})


def serialize(value: Any) -> str:
    """A string verbatim; anything else as JSON (records with every declared field, in
    declaration order; a bare number or bool outside a record as its Python string)."""
    return value if isinstance(value, str) else json.dumps(_plain(value, top=True), default=str)


def _plain(value: Any, top: bool = False) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    if isinstance(value, (list, tuple)):
        return [_plain(v, top) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, top) for k, v in value.items()}
    if top and isinstance(value, (bool, int, float)):
        return str(value)
    return value


@dataclass
class ToolMessage:
    id: str
    requestor: str
    content: str
    error: bool


def execute(toolkits: dict[str, Toolkit | None], call_id: str, name: str, arguments: dict,
            requestor: Literal["assistant", "user"], sync: Callable[[], None] = lambda: None
            ) -> ToolMessage:
    """Run one tool call as §1.1 describes; every failure becomes ``"Error: " + message``."""
    try:
        toolkit = toolkits.get(requestor)
        if toolkit is None:
            raise DomainError("User tools not available" if requestor == "user"
                              else "Tools not available")
        spec = toolkit.tools.get(name)
        if spec is None:
            raise DomainError(f"Tool '{name}' not found.")
        result = spec.fn(**arguments)
        sync()
        return ToolMessage(call_id, requestor, serialize(result), False)
    except Exception as e:  # the model reads the failure; the episode goes on
        return ToolMessage(call_id, requestor, f"Error: {e}", True)
