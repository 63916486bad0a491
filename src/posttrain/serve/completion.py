"""From a chat request to sampled, parsed and recorded choices, whatever the API.

``Completer.complete`` checks the conversation's length before it tokenises it (text of ``c``
characters needs at least ``c / L`` tokens, ``L`` the longest token's length in characters:
more than the context window is refused at once), renders it with the model's chat template
(tool calls the server returned replayed as sampled, others in the model's tool-call format;
a final assistant message is continued, not closed), checks it fits the context window,
samples ``n`` choices with the engine (batched with other sessions' requests: ``Batcher``;
with ``quick`` instructions, answered from the prompt's KV cache first: ``generate_quick``),
cuts each at its first stop string, parses its tool calls in the model's format
(``tool_formats``; each gets a unique id), and records the call in the session's trace. A
malformed tool call stays in the text, with its parse error on the choice. A ``tool_choice``
that forces a call opens it for the model (``tool_choice``).

While training (``forced``), the run's sampling replaces the request's: its temperature,
top-p and top-k (the trainer recomputes log-probs under them), its ``max_new_tokens`` as the
ceiling and default of ``max_tokens``, and a fresh seed per call (a group's samples differ
even when an agent always sends the same ``seed``): derived from the session's seed and the
call's number when the session has one, so the samples do not depend on timing.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import uuid

from posttrain.engines import Engine
from posttrain.models import render_prompt, stop_tokens
from posttrain.models.quick_tokens import quick_token_ids
from posttrain.serve.batching import Batcher
from posttrain.serve.bridge import Choice, SessionTrace
from posttrain.serve.messages import normalised, rendered
from posttrain.serve.requests import QuickAnswers, Request, RequestError, Sampled
from posttrain.serve.tool_choice import ANY_TOOL
from posttrain.serve.tool_formats import ToolFormat, call_opening, detect
from posttrain.types import SamplingParams


def continued(messages: list[dict], text: str) -> list[dict]:
    """``messages`` with ``text`` appended to the final assistant message (a new one when the
    last is not the assistant's)."""
    if messages[-1]["role"] == "assistant":
        return [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + text}]
    return [*messages, {"role": "assistant", "content": text}]


class Completer:
    """An engine and its tokenizer behind the chat APIs; ``context`` is the model's window."""

    def __init__(self, engine: Engine, tokenizer, context: int, default_max_tokens: int = 256,
                 batch_window_s: float = 0.005, tool_format: ToolFormat | None = None) -> None:
        """``tool_format``: how the model writes tool calls (default: what its chat template
        shows, ``tool_formats.detect``)."""
        self.engine, self.tokenizer, self.context = engine, tokenizer, context
        self.tool_format = tool_format or detect(tokenizer)
        self.default_max_tokens = default_max_tokens
        self.longest_token = max(map(len, tokenizer.get_vocab()), default=1)
        self.batcher = Batcher(engine, batch_window_s)
        self.forced: SamplingParams | None = None
        self._seeds = itertools.count(1)  # a request without a seed gets the next one

    def complete(self, request: Request, trace: SessionTrace | None) -> tuple[int, list[Sampled]]:
        """``(prompt tokens, choices)``; the call is recorded in ``trace`` (if any)."""
        messages = rendered(normalised(request.messages), self.tool_format,
                            trace.sampled_calls if trace is not None else {},
                            trace.sampled_texts if trace is not None else {})
        self._check_length(messages)
        opening = "" if request.force_tool is None else call_opening(
            self.tool_format, None if request.force_tool == ANY_TOOL else request.force_tool)
        if opening:  # a forced call: opened for the model, continued as a prefill is
            messages = continued(messages, opening)
        prompt = self._prompt(messages, request.tools, trace)
        sampling = self._sampling(request, self.context - len(prompt), len(prompt), trace)
        quick = self._quick_ids(request.quick)
        if quick:
            asked = self.batcher.generate_quick([prompt] * request.n, sampling, quick)
            outs = [o.output for o in asked]
        else:
            outs = self.batcher.generate([prompt] * request.n, sampling)
        sampled = [self._choice(o.token_ids, o.logprobs, o.version, o.finish_reason,
                                request.stop, request.tools, opening) for o in outs]
        if quick:
            answers = QuickAnswers({name: self.tokenizer.decode(a, skip_special_tokens=True)
                                    for name, a in zip(request.quick, asked[0].answers)},
                                   asked[0].prefill_saved)
            sampled = [dataclasses.replace(s, quick=answers) for s in sampled]
        if trace is not None:
            self._record(trace, prompt, messages, sampled, request.tools, opening)
        return len(prompt), sampled

    def _record(self, trace: SessionTrace, prompt: list[int], messages: list[dict],
                sampled: list[Sampled], tools: list[dict] | None, opening: str) -> None:
        """Record the call; a continued final assistant message (a prefill, a forced call's
        opening) and its continuation are one message. Remember what each reply sampled, by
        its tool-call ids and by the visible text a client will send back (after its own
        prefill, if any: the opening is in a forced reply's visible text)."""
        prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else None
        context = messages[:-1] if prefill is not None else messages
        replies = [self._message(s, prefill or "") for s in sampled]
        trace.record(prompt, context, [Choice(s.token_ids, s.logprobs, s.version, reply)
                                       for s, reply in zip(sampled, replies)], tools)
        clients = (prefill or "").removesuffix(opening)
        for s, reply in zip(sampled, replies):
            trace.sampled_calls |= {c.call_id: reply["content"] for c in s.tool_calls}
            if not s.tool_calls:
                trace.sampled_texts[clients + s.text] = reply["content"]

    def _quick_ids(self, names: list[str]) -> tuple[int, ...]:
        """The tokens of the quick instructions ``names``; a ``RequestError`` when the
        tokenizer lacks one or the engine cannot answer them."""
        if not names:
            return ()
        check = getattr(self.engine, "check_quick", None)
        try:
            if check is None:
                raise ValueError("this server's engine does not answer quick instructions "
                                 "(the torch engine does, with a Llama-family model)")
            check()
            return tuple(quick_token_ids(self.tokenizer, names))
        except ValueError as exc:
            raise RequestError(f"quick: {exc}", "quick") from None

    def _check_length(self, messages: list[dict]) -> None:
        chars = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
        if chars > self.longest_token * self.context:
            raise RequestError(
                f"the messages hold {chars} characters: at least {chars // self.longest_token} "
                f"tokens, more than the model's context window of {self.context} tokens",
                "messages", "context_length_exceeded")

    def _prompt(self, messages: list[dict], tools: list[dict] | None,
                trace: SessionTrace | None) -> list[int]:
        prefill = messages[-1]["role"] == "assistant"  # continue it (Anthropic's prefill)
        try:
            text = render_prompt(self.tokenizer, messages, tools=tools, continue_final=prefill)
        except Exception as exc:  # the template's own error: the request's fault
            raise RequestError(f"the chat template cannot render these messages: {exc}",
                               "messages") from exc
        tok = self.tokenizer
        encode = functools.partial(tok.encode, add_special_tokens=False)
        if trace is None:
            return encode(text)
        return trace.prompt_after(text, lambda ids: tok.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False), encode)

    def _sampling(self, request: Request, room: int, prompt_tokens: int,
                  trace: SessionTrace | None) -> SamplingParams:
        f = self.forced
        budget = min(request.max_tokens or f.max_new_tokens, f.max_new_tokens) if f is not None \
            else request.max_tokens or min(self.default_max_tokens, room)
        if room < 1 or budget > room:
            asked = f" and max_tokens is {budget}" if request.max_tokens or f else ""
            raise RequestError(
                f"the prompt has {prompt_tokens} tokens{asked}: more than the model's context "
                f"window of {self.context} tokens allows", "messages", "context_length_exceeded")
        seed = trace.next_seed() if f is not None and trace is not None else None
        if seed is None:
            seed = next(self._seeds) if f is not None or request.seed is None else request.seed
        stop = stop_tokens(self.tokenizer)
        if f is not None:
            return SamplingParams(budget, f.temperature, f.top_p, f.top_k, stop, seed)
        return SamplingParams(budget, request.temperature, request.top_p, request.top_k, stop,
                              seed)

    def _choice(self, ids: list[int], logprobs: list[float], version: int, reason: str,
                stop: list[str], tools: list[dict] | None, opening: str = "") -> Sampled:
        """A choice's visible text and calls: its text after ``opening`` (a forced call's),
        cut at the first stop string."""
        cut = self._stop_at(ids, stop) if stop else None
        if cut is not None:
            ids, logprobs, reason = ids[:cut], logprobs[:cut], "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        hit = None if cut is None else min((s for s in stop if s in text), key=text.find)
        text = opening + (text if hit is None else text[:text.find(hit)])
        calls = self.tool_format.parse(text, tools)
        for call in calls:
            call.call_id = f"call_{uuid.uuid4().hex[:24]}"
        errors = [c.error for c in calls if c.error is not None]
        good = [] if errors else calls  # a malformed call: the whole text comes back, with errors
        visible = self.tool_format.strip(text) if good else text
        return Sampled(visible, good, errors, "tool_calls" if good else reason, list(ids),
                       list(logprobs), version, hit)

    def _stop_at(self, ids: list[int], stop: list[str]) -> int | None:
        """The length of the shortest prefix of ``ids`` whose text holds a stop string."""
        if not any(s in self.tokenizer.decode(ids, skip_special_tokens=True) for s in stop):
            return None
        for k in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
            if any(s in text for s in stop):
                return k
        return None

    def _message(self, s: Sampled, prefill: str = "") -> dict:
        """The assistant message this choice's tokens are, as sampled (after ``prefill``, the
        text it continued): special tokens and tool-call text included, the closing eos left
        to the template."""
        ids = s.token_ids[:-1] if s.token_ids[-1:] == [self.tokenizer.eos_token_id] else s.token_ids
        return {"role": "assistant", "content": prefill + self.tokenizer.decode(ids)}
