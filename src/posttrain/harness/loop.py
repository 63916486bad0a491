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
from posttrain.harness.guard import BLOCKED, Guard
from posttrain.harness.tool_calls import HERMES_PATTERN, ToolCall, parse_tool_calls
from posttrain.harness.tools import ToolRegistry, ToolResult
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
    state each step acts in, for step-level credit (``gigpo``); a ``guard`` inspects every call
    before it runs."""

    def __init__(
        self,
        engine: Engine,
        tokenizer,
        tools: ToolRegistry,
        limits: LoopLimits = LoopLimits(),
        call_pattern: str = HERMES_PATTERN,
        state_key: Callable[[list[dict]], Hashable] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.engine, self.tokenizer, self.tools = engine, tokenizer, tools
        self.limits, self.call_pattern, self.state_key = limits, call_pattern, state_key
        self.guard = guard

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
        return self.run_many([(messages, reference, group_id)], sampling, reward_fn)[0]

    def run_many(
        self,
        items: Sequence[tuple[Sequence[dict], str, str]],
        sampling: SamplingParams,
        reward_fn: RewardFunction,
    ) -> list[Episode]:
        """Play ``(messages, reference, group_id)`` episodes in lockstep: every round, one
        batched ``generate`` for all episodes still running."""
        states = [_Episode(self, list(m), ref, gid) for m, ref, gid in items]
        for _ in range(self.limits.max_turns):
            active = [st for st in states if st.stop is None and st.ready()]
            if not active:
                break
            for st in active:
                if self.state_key is not None:
                    st.state_keys.append(self.state_key(st.msgs))
            budget = min(st.budget() for st in active)
            outs = self.engine.generate([st.trace.ids for st in active],
                                        replace(sampling, max_new_tokens=budget))
            for st, out in zip(active, outs):
                st.take(out)
        for st in states:
            if st.stop is None:
                st.stop = "max_turns"
        return [st.episode(reward_fn) for st in states]


class _Episode:
    """One episode's running state inside ``AgentLoop.run_many``."""

    def __init__(self, loop: AgentLoop, msgs: list[dict], reference: str, group_id: str):
        self.loop, self.msgs, self.reference, self.group_id = loop, msgs, reference, group_id
        text = loop._render(msgs, True)
        self.trace = _Trace(loop._encode(text), text)
        self.stop: str | None = None
        self.final, self.errors, self.repeats, self.last = "", 0, 0, None
        self.records: list[dict[str, Any]] = []
        self.state_keys: list[Hashable] = []
        self.started = time.monotonic()
        self.flags, self.blocks, self.hacked = 0, 0, False

    def budget(self) -> int:
        limits = self.loop.limits
        return min(limits.max_new_tokens, limits.max_tokens - len(self.trace.ids))

    def ready(self) -> bool:
        """Whether another turn may start; sets the stop reason when not."""
        if self.budget() <= 0:
            self.stop = "max_tokens"
        elif time.monotonic() - self.started > self.loop.limits.timeout_s:
            self.stop = "timeout"
        return self.stop is None

    def take(self, out) -> None:
        """Record one sampled turn, run its tool calls and append the observations."""
        loop, limits, tok = self.loop, self.loop.limits, self.loop.tokenizer
        sampled_text = tok.decode(out.token_ids, skip_special_tokens=False)
        begin = len(self.trace.ids)
        self.trace.add(list(out.token_ids), sampled_text, out.logprobs, out.version)
        self.trace.steps.append(StepSpan(begin, len(self.trace.ids)))
        content = sampled_text.removesuffix(tok.eos_token)
        self.msgs.append({"role": "assistant", "content": content})
        if out.finish_reason != "stop":
            self.stop = "max_tokens"
            return
        calls = parse_tool_calls(content, loop.call_pattern)
        if not calls:
            self.stop, self.final = "answer", content
            return
        results = self._execute(calls)
        self.errors += sum(r.error for r in results)
        self.records.append({"calls": [c.raw for c in calls],
                             "results": [r.full_output for r in results],
                             "errors": [r.error for r in results]})
        key = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
        self.repeats, self.last = (self.repeats + 1 if key == self.last else 1), key
        if self.errors > limits.max_tool_errors:
            self.stop = "tool_errors"
            return
        if self.repeats >= limits.loop_repeats:
            self.stop = "loop"
            return
        self.msgs += [{"role": "tool", "content": r.output} for r in results]
        following = loop._render(self.msgs, True)
        if not following.startswith(self.trace.text):
            raise ChatTemplateError("the chat template does not extend the rendered "
                                    "conversation with the tool turn; cannot append tokens")
        scaffold = following[len(self.trace.text):]
        self.trace.add(loop._encode(scaffold), scaffold)

    def _execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run the calls the guard lets through; blocked ones get a dummy result."""
        guard = self.loop.guard
        verdicts = [guard.inspect(c) for c in calls] if guard else []
        for v in verdicts:
            self.flags += bool(v.flags)
            self.blocks += v.blocked
            self.hacked |= v.confirmed and guard.on_hack == "zero_reward"
        blocked = {v.call_id for v in verdicts if v.blocked}
        ran = iter(self.loop.tools.execute_sync([c for c in calls if c.call_id not in blocked]))
        return [ToolResult(c.call_id, c.name, BLOCKED, BLOCKED, False, 0.0)
                if c.call_id in blocked else next(ran) for c in calls]

    def episode(self, reward_fn: RewardFunction) -> Episode:
        parts, total = reward_fn(self.final, self.reference)
        if self.hacked:  # the guard's zero_reward policy
            parts, total = dict.fromkeys(parts, 0.0), 0.0
        t = self.trace
        return Episode(
            segments=[Segment(t.ids, t.mask, t.logprobs, t.versions, t.steps)], rewards=parts,
            reward=total, group_id=self.group_id, finish_reason=self.stop,
            meta={"final": self.final, "messages": self.msgs, "tool_records": self.records,
                  "tool_errors": self.errors, "turns": len(t.steps),
                  "state_keys": self.state_keys, "reference": self.reference,
                  "tools": self.loop.tools.schemas(), "guard_flags": self.flags,
                  "guard_blocks": self.blocks},
        )
