"""From a chat request to sampled, parsed and recorded choices, whatever the API.

``Completer.complete`` renders the conversation with the model's chat template (tool calls in
the template's text form), checks it fits the context window, samples ``n`` choices with the
engine (batched with other sessions' requests: ``Batcher``), cuts each at its first stop string,
parses its tool calls in the model's format (``tool_formats``), and records the call in the
session's trace. A malformed tool call stays in the text, with its parse error on the choice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from posttrain.engines import Engine
from posttrain.engines.chat import as_template_messages
from posttrain.harness.tool_calls import ToolCall
from posttrain.models import encode_prompt
from posttrain.serve.batching import Batcher
from posttrain.serve.bridge import Choice, SessionTrace
from posttrain.serve.tool_formats import ToolFormat, detect
from posttrain.types import SamplingParams


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


class Completer:
    """An engine and its tokenizer behind the chat APIs; ``context`` is the model's window."""

    def __init__(self, engine: Engine, tokenizer, context: int,
                 default_max_tokens: int = 256, batch_window_s: float = 0.005,
                 tool_format: ToolFormat | None = None) -> None:
        """``tool_format``: how the model writes tool calls (default: what its chat template
        shows, ``tool_formats.detect``)."""
        self.engine, self.tokenizer, self.context = engine, tokenizer, context
        self.tool_format = tool_format or detect(tokenizer)
        self.default_max_tokens = default_max_tokens
        self.batcher = Batcher(engine, batch_window_s)
        # training: the run's temperature / top-p / top-k replace the request's (the trainer
        # recomputes log-probs under them) and its max_new_tokens caps max_tokens
        self.forced: SamplingParams | None = None
        self._lock = threading.Lock()
        self._calls = 0  # a request without a seed gets the next one

    def complete(self, request: Request, trace: SessionTrace | None
                 ) -> tuple[int, list[Sampled]]:
        """``(prompt tokens, choices)``; the call is recorded in ``trace`` (if any)."""
        messages = as_template_messages(request.messages, self.tool_format.render)
        try:
            prompt = encode_prompt(self.tokenizer, messages, tools=request.tools)
        except Exception as exc:  # the template's own error: the request's fault
            raise RequestError(f"the chat template cannot render these messages: {exc}",
                               "messages") from exc
        room = self.context - len(prompt)
        budget = request.max_tokens or min(self.default_max_tokens, room)
        if room < 1 or budget > room:
            asked = f" and max_tokens is {request.max_tokens}" if request.max_tokens else ""
            raise RequestError(
                f"the prompt has {len(prompt)} tokens{asked}: more than the model's context "
                f"window of {self.context} tokens allows", "messages", "context_length_exceeded")
        with self._lock:
            self._calls += 1
            seed = request.seed if request.seed is not None else self._calls
        sampling = SamplingParams(
            max_new_tokens=budget, temperature=request.temperature, top_p=request.top_p,
            stop_token_ids=(self.tokenizer.eos_token_id,), seed=seed)
        if self.forced is not None:
            f = self.forced
            sampling = SamplingParams(min(budget, f.max_new_tokens), f.temperature, f.top_p,
                                      f.top_k, (self.tokenizer.eos_token_id,), seed)
        outs = self.batcher.generate([prompt] * request.n, sampling)
        sampled = [self._choice(o.token_ids, o.logprobs, o.version, o.finish_reason,
                                request.stop) for o in outs]
        if trace is not None:
            trace.record(prompt, messages, [Choice(s.token_ids, s.logprobs, s.version,
                                                   self._message(s)) for s in sampled],
                         request.tools)
        return len(prompt), sampled

    def _choice(self, ids: list[int], logprobs: list[float], version: int, reason: str,
                stop: list[str]) -> Sampled:
        cut = self._stop_at(ids, stop) if stop else None
        if cut is not None:
            ids, logprobs, reason = ids[:cut], logprobs[:cut], "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        hit = None
        if cut is not None:
            hit = min((s for s in stop if s in text), key=text.find)
            text = text[:text.find(hit)]
        calls = self.tool_format.parse(text)
        visible = self.tool_format.strip(text) if calls else text
        good = [c for c in calls if c.error is None]
        errors = [c.error for c in calls if c.error is not None]
        if errors:  # a malformed call: the whole text comes back, the error is recorded
            visible, good = text, []
        return Sampled(visible, good, errors, "tool_calls" if good else reason, list(ids),
                       list(logprobs), version, hit)

    def _stop_at(self, ids: list[int], stop: list[str]) -> int | None:
        """The length of the shortest prefix of ``ids`` whose text holds a stop string."""
        for k in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
            if any(s in text for s in stop):
                return k
        return None

    def _message(self, s: Sampled) -> dict:
        """The assistant message this choice's tokens are, as sampled: special tokens and
        tool-call text included, the closing eos left to the template. (What a client sends
        back may differ: the visible text drops special tokens; then the next call splits.)"""
        ids = s.token_ids[:-1] if s.token_ids[-1:] == [self.tokenizer.eos_token_id] \
            else s.token_ids
        return {"role": "assistant", "content": self.tokenizer.decode(ids)}
