"""What every API's request becomes and what comes back: ``Request`` (OpenAI's message form),
``Sampled`` (one choice), and ``RequestError`` (a refusal, HTTP 400)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from posttrain.harness.tool_calls import ToolCall


class RequestError(ValueError):
    """A request the server refuses (HTTP 400), with the parameter it concerns."""

    def __init__(self, message: str, param: str | None = None,
                 code: str = "invalid_request") -> None:
        super().__init__(message)
        self.param, self.code = param, code


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], body: dict) -> M:
    """``body`` as ``model``; the first problem as a ``RequestError`` naming its field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise RequestError(f"{where}: {first['msg']}", where) from None


@dataclass(frozen=True)
class QuickAnswers:
    """A request's quick instructions answered after its prompt (``quick``, docs/serve.md),
    and the prompt tokens a separate request per instruction would have prefilled again."""

    answers: dict[str, str]
    prefill_saved: int

    def to_dict(self) -> dict:
        return {"answers": self.answers, "prefill_saved": self.prefill_saved}


@dataclass
class Sampled:
    """One choice as the APIs return it."""

    text: str  # the visible text: the completion without its tool-call blocks
    tool_calls: list[ToolCall]
    parse_errors: list[str]
    finish_reason: str  # stop | length | tool_calls
    token_ids: list[int]
    logprobs: list[float]
    version: int
    stop_sequence: str | None = None  # the stop string that ended it
    quick: QuickAnswers | None = None  # the request's, on each of its choices


@dataclass
class Request:
    """What every API asks of a completion, in OpenAI's message form."""

    messages: list[dict]
    tools: list[dict] | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    force_tool: str | None = None  # a tool the reply must call (``tool_choice.ANY_TOOL``: any)
    quick: list[str] = field(default_factory=list)  # quick instructions to answer (their tokens)
    top_k: int = 0  # Anthropic's: sample from the k likeliest tokens (0: all)
