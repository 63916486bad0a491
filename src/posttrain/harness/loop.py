"""``AgentLoop``: multi-turn tool use with exact token bookkeeping.

The conversation is rendered with the tokenizer's chat template once, then only appended to:
each turn adds the tokens the engine sampled (loss mask 1) and then the tokens of the template
text that follows them up to the next generation prompt — the end of the assistant turn, the
tool observations, the next ``<|im_start|>assistant`` (loss mask 0). Earlier turns are never
re-tokenised, so the recorded ids are exactly the ids the engine was given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from posttrain.engines import Engine
from posttrain.harness.tool_calls import HERMES_PATTERN, parse_tool_calls
from posttrain.harness.tools import ToolRegistry
from posttrain.models import ChatTemplateError
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams, Segment, StepSpan

STOP_REASONS = ("answer", "max_turns", "max_tokens", "timeout", "loop", "tool_errors")


@dataclass(frozen=True)
class LoopLimits:
    """When an episode ends, besides a final answer (a turn without tool calls)."""

    max_turns: int = 8
    max_tokens: int = 2048  # the whole episode's context
    max_new_tokens: int = 256  # one assistant turn
    timeout_s: float = 120.0
    max_tool_errors: int = 3
    loop_repeats: int = 3  # the same calls this many turns in a row


@dataclass
class _Trace:
    ids: list[int]
    text: str
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    steps: list[StepSpan] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.mask, self.logprobs, self.versions = [0] * n, [0.0] * n, [-1] * n

    def add(self, ids: list[int], text: str, logprobs: list[float] | None = None,
            version: int = -1) -> None:
        sampled = logprobs is not None
        self.ids += ids
        self.text += text
        self.mask += [int(sampled)] * len(ids)
        self.logprobs += list(logprobs) if sampled else [0.0] * len(ids)
        self.versions += [version if sampled else -1] * len(ids)


class AgentLoop:
    """One engine, one tokenizer, one tool set. ``state_key(messages)`` (optional) names the
    state each step acts in, for step-level credit (``gigpo``)."""

    def __init__(
        self,
        engine: Engine,
        tokenizer,
        tools: ToolRegistry,
        limits: LoopLimits = LoopLimits(),
        call_pattern: str = HERMES_PATTERN,
        state_key: Callable[[list[dict]], Hashable] | None = None,
    ) -> None:
        self.engine, self.tokenizer, self.tools = engine, tokenizer, tools
        self.limits, self.call_pattern, self.state_key = limits, call_pattern, state_key

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools.schemas() or None, tokenize=False,
            add_generation_prompt=generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def run(
        self,
        messages: Sequence[dict],
        sampling: SamplingParams,
        reward_fn: RewardFunction,
        reference: str,
        group_id: str = "",
    ) -> Episode:
        """Play one episode and score its final answer (empty when there is none)."""
        limits, msgs = self.limits, list(messages)
        start_text = self._render(msgs, True)
        trace = _Trace(self._encode(start_text), start_text)
        eos = self.tokenizer.eos_token
        stop, final, errors, repeats, last = "max_turns", "", 0, 0, None
        records: list[dict[str, Any]] = []
        state_keys: list[Hashable] = []
        started = time.monotonic()
        for _ in range(limits.max_turns):
            budget = min(limits.max_new_tokens, limits.max_tokens - len(trace.ids))
            if budget <= 0:
                stop = "max_tokens"
                break
            if time.monotonic() - started > limits.timeout_s:
                stop = "timeout"
                break
            if self.state_key is not None:
                state_keys.append(self.state_key(msgs))
            out = self.engine.generate([trace.ids], replace(sampling, max_new_tokens=budget))[0]
            sampled_text = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
            begin = len(trace.ids)
            trace.add(list(out.token_ids), sampled_text, out.logprobs, out.version)
            trace.steps.append(StepSpan(begin, len(trace.ids)))
            content = sampled_text.removesuffix(eos)
            msgs.append({"role": "assistant", "content": content})
            if out.finish_reason != "stop":
                stop = "max_tokens"
                break
            calls = parse_tool_calls(content, self.call_pattern)
            if not calls:
                stop, final = "answer", content
                break
            results = self.tools.execute_sync(calls)
            errors += sum(r.error for r in results)
            records.append({"calls": [c.raw for c in calls],
                            "results": [r.full_output for r in results],
                            "errors": [r.error for r in results]})
            key = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
            repeats, last = (repeats + 1 if key == last else 1), key
            if errors > limits.max_tool_errors:
                stop = "tool_errors"
                break
            if repeats >= limits.loop_repeats:
                stop = "loop"
                break
            msgs += [{"role": "tool", "content": r.output} for r in results]
            following = self._render(msgs, True)
            if not following.startswith(trace.text):
                raise ChatTemplateError("the chat template does not extend the rendered "
                                        "conversation with the tool turn; cannot append tokens")
            scaffold = following[len(trace.text):]
            trace.add(self._encode(scaffold), scaffold)
        parts, total = reward_fn(final, reference)
        segment = Segment(trace.ids, trace.mask, trace.logprobs, trace.versions, trace.steps)
        return Episode(
            segments=[segment], rewards=parts, reward=total, group_id=group_id,
            finish_reason=stop,
            meta={"final": final, "messages": msgs, "tool_records": records,
                  "tool_errors": errors, "turns": len(trace.steps), "state_keys": state_keys,
                  "reference": reference},
        )
