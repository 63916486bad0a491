"""One episode's running state inside ``AgentLoop``: its turns, tool calls, compactions and
the segments they close, and branches from its intermediate turns (``tree_grpo``).

Every step (a sampled turn) records a ``StepSpan`` in its segment, the ``state_key`` of the
context it acted in and whether its tool calls were malformed (``behaviour_reg``'s error
tokens); the three lists stay aligned over the episode's segments.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from posttrain.engines import Engine
from posttrain.harness.compaction import Compaction
from posttrain.harness.episode_env import EpisodeEnv, is_conversation
from posttrain.harness.guard import BLOCKED, Guard
from posttrain.harness.tool_calls import ToolCall, parse_tool_calls
from posttrain.harness.tools import ToolRegistry, ToolResult
from posttrain.harness.trace import Trace
from posttrain.rewards import RewardFunction
from posttrain.types import ChatTemplateError, Episode, SamplingParams, Segment, StepSpan

STOP_REASONS = ("answer", "max_turns", "max_tokens", "timeout", "loop", "tool_errors")


@dataclass(frozen=True)
class LoopLimits:
    """When an episode ends, besides a final answer (a turn without tool calls)."""

    max_turns: int = 8
    max_tokens: int = 2048  # the context window: one segment's tokens
    max_new_tokens: int = 256  # one assistant turn
    timeout_s: float = 120.0
    max_tool_errors: int = 3
    loop_repeats: int = 3  # the same calls this many turns in a row


class LoopView(Protocol):
    """What an episode reads of the ``AgentLoop`` that plays it."""

    engine: Engine
    tokenizer: Any
    tools: ToolRegistry
    limits: LoopLimits
    call_pattern: str
    state_key: Callable[[list[dict]], Hashable] | None
    guard: Guard | None
    compaction: Compaction
    env_factory: Callable[[str], EpisodeEnv] | None

    def render(self, messages: list[dict], generation_prompt: bool,
               tools: ToolRegistry | None = None) -> str: ...

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Snapshot:
    """The state at the start of a step: lengths of the records and the counters."""

    segment: int
    ids: int
    text: int
    msgs: int
    records: int
    turns: int
    errors: int
    repeats: int
    last: Any
    flags: int
    blocks: int
    hacked: bool


class EpisodeState:
    """``task``: the opening messages; the episode plays from ``task`` (or a branch's prefix)."""

    def __init__(self, loop: LoopView, task: Sequence[dict], reference: str, group_id: str,
                 sampling: SamplingParams) -> None:
        self.loop, self.task, self.reference, self.group_id = loop, list(task), reference, group_id
        self.sampling = sampling
        self.env = loop.env_factory(reference) if loop.env_factory is not None else None
        self.tools = loop.tools if self.env is None else self.env.tools
        self.conversation = is_conversation(self.env)
        if self.conversation:
            task = self.task = [*self.task, *self.env.opening()]
        self.msgs = [dict(m) for m in task]
        text = self.render(self.msgs, True)
        self.trace = Trace(loop.encode(text), text)
        self.closed: list[tuple[Segment, list[dict]]] = []  # segment, its conversation
        self.stop: str | None = None
        self.final, self.errors, self.repeats, self.last, self.turns = "", 0, 0, None, 0
        self.records: list[dict[str, Any]] = []
        self.state_keys: list[Hashable] = []
        self.step_errors: list[bool] = []
        self.snapshots: dict[int, Snapshot] = {}  # step index -> state before it
        self.flags, self.blocks, self.hacked, self.compactions = 0, 0, False, 0
        self.branched_at: int | None = None
        self.started = time.monotonic()

    # -- turns ---------------------------------------------------------------------------

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.loop.render(messages, generation_prompt, self.tools)

    def budget(self) -> int:
        limits = self.loop.limits
        return min(limits.max_new_tokens, limits.max_tokens - len(self.trace.ids))

    def ready(self) -> bool:
        """Whether another turn may start (compacting first when due); sets the stop reason
        when not."""
        limits, compaction = self.loop.limits, self.loop.compaction
        if self.conversation and (reason := self.env.stop_reason()):
            self.stop = reason
        elif self.turns >= limits.max_turns:
            self.stop = "max_turns"
        elif time.monotonic() - self.started > limits.timeout_s:
            self.stop = "timeout"
        else:
            if compaction.due(len(self.trace.ids), limits.max_tokens, self.compactions):
                self._compact()
            if self.stop is None and self.budget() <= 0:
                self.stop = "max_tokens"
        return self.stop is None

    def _add_step(self, out, context: list[dict], trained: bool = True) -> str:
        """Append a sampled turn; returns its text without the end-of-sequence token."""
        tok = self.loop.tokenizer
        text = tok.decode(out.token_ids, skip_special_tokens=False)
        begin = len(self.trace.ids)
        self.trace.add(list(out.token_ids), text, out.logprobs if trained else None, out.version)
        if trained:
            self.trace.steps.append(StepSpan(begin, len(self.trace.ids)))
            state_key = self.loop.state_key
            self.state_keys.append(state_key(context) if state_key is not None else None)
            self.step_errors.append(False)
        return text.removesuffix(tok.eos_token)

    def take(self, out) -> None:
        """Record one sampled turn, run its tool calls and append the observations."""
        loop, limits = self.loop, self.loop.limits
        self.snapshots[len(self.state_keys)] = self._snapshot()
        content = self._add_step(out, self.msgs)
        self.msgs.append({"role": "assistant", "content": content})
        self.turns += 1
        if out.finish_reason != "stop":
            self.stop = "max_tokens"
            return
        calls = parse_tool_calls(content, loop.call_pattern)
        if not calls:
            self._answered(content)
            return
        if self.conversation:  # the turn's own words, for the other party's record
            self.env.calls_text(re.sub(loop.call_pattern, "", content, flags=re.DOTALL).strip())
        results = self._execute(calls)
        self.step_errors[-1] = any(r.malformed for r in results)
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
        if self.conversation and (reason := self.env.stop_reason()):
            self.stop = reason
            return
        self._observe([{"role": "tool", "content": r.output} for r in results])

    def _answered(self, content: str) -> None:
        """A turn without tool calls: the final answer, or (in a conversation) a message to
        the other party, whose reply continues the episode."""
        if not self.conversation:
            self.stop, self.final = "answer", content
            return
        message, reason = self.env.reply(content)
        if reason is not None:
            self.stop, self.final = reason, content
            return
        self.repeats, self.last = 0, None  # the same call again after a reply is no loop
        self._observe([{"role": "user", "content": message}])

    def _observe(self, messages: list[dict]) -> None:
        """Append observations and the template's scaffold up to the next generation prompt
        (loss mask 0)."""
        self.msgs += messages
        following = self.render(self.msgs, True)
        if not following.startswith(self.trace.text):
            raise ChatTemplateError("the chat template does not extend the rendered "
                                    "conversation with the new turn; cannot append tokens")
        scaffold = following[len(self.trace.text):]
        self.trace.add(self.loop.encode(scaffold), scaffold)

    def _execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run the calls the guard lets through; blocked ones get a dummy result."""
        guard = self.loop.guard
        verdicts = [guard.inspect(c) for c in calls] if guard else []
        for v in verdicts:
            self.flags += bool(v.flags)
            self.blocks += v.blocked
            self.hacked |= v.confirmed and guard.on_hack == "zero_reward"
        blocked = {v.call_id for v in verdicts if v.blocked}
        ran = iter(self.tools.execute_sync([c for c in calls if c.call_id not in blocked]))
        return [ToolResult(c.call_id, c.name, BLOCKED, BLOCKED, "blocked", 0.0)
                if c.call_id in blocked else next(ran) for c in calls]

    # -- compaction ----------------------------------------------------------------------

    def _close(self) -> None:
        self.closed.append((self.trace.segment(), [dict(m) for m in self.msgs]))

    def _restart(self, messages: list[dict]) -> None:
        self.msgs = messages
        text = self.render(messages, True)
        self.trace = Trace(self.loop.encode(text), text)

    def _compact(self) -> None:
        """Close the segment and continue from the rebuilt context; a summarising strategy
        first plays the summary turn as a segment of its own. A rebuild that changes nothing,
        or a summary request that does not fit the window, is skipped (the segment goes on)."""
        loop, compaction = self.loop, self.loop.compaction

        def rebuild(summary: str) -> list[dict]:
            return compaction.rebuild(self.task, self.msgs, summary,
                                      lambda s: len(loop.encode(s)))

        if not compaction.summarises:
            rebuilt = rebuild("")
            if rebuilt == self.msgs:
                return
            self._close()
        else:
            request = compaction.summary_request(self.msgs)
            text = self.render(request, True)
            ids = loop.encode(text)
            budget = min(loop.limits.max_new_tokens, loop.limits.max_tokens - len(ids))
            if budget <= 0:  # no room to ask for a summary: go on without compacting
                return
            self._close()
            self.msgs, self.trace = request, Trace(ids, text)
            (out,) = loop.engine.generate([ids], replace(self.sampling, max_new_tokens=budget))
            summary = self._add_step(out, self.msgs, compaction.train_summary)
            self.msgs.append({"role": "assistant", "content": summary})
            self._close()
            rebuilt = rebuild(summary)
        self._restart(rebuilt)
        self.compactions += 1

    # -- branching -----------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        t = self.trace
        return Snapshot(len(self.closed), len(t.ids), len(t.text), len(self.msgs),
                        len(self.records), self.turns, self.errors, self.repeats, self.last,
                        self.flags, self.blocks, self.hacked)

    def branch_points(self) -> list[int]:
        """Steps after the first that start in the current segment: their context holds at
        least one observation and is the current segment's prefix."""
        return [i for i, s in self.snapshots.items() if i > 0 and s.segment == len(self.closed)]

    def branch(self, step: int) -> EpisodeState:
        """A new episode continuing from the state before ``step``. The shared prefix belongs
        to this (parent) episode: in the branch it is context, with loss mask 0. An episode with
        its own environment cannot branch: the environment's state cannot be copied."""
        if self.env is not None:
            raise ValueError("cannot branch an episode that has its own environment state")
        s = self.snapshots[step]
        b = EpisodeState.__new__(EpisodeState)
        b.__dict__.update(self.__dict__)  # task, reference, group, sampling and the loop
        b.trace = Trace(self.trace.ids[: s.ids], self.trace.text[: s.text])
        b.msgs = [dict(m) for m in self.msgs[: s.msgs]]
        b.records = [dict(r) for r in self.records[: s.records]]
        b.closed, b.state_keys, b.step_errors, b.snapshots = [], [], [], {}
        b.turns, b.errors, b.repeats, b.last = s.turns, s.errors, s.repeats, s.last
        b.flags, b.blocks, b.hacked = s.flags, s.blocks, s.hacked
        b.stop, b.final, b.branched_at, b.started = None, "", step, time.monotonic()
        return b

    # -- result --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the episode's environment (idempotent)."""
        if self.env is not None:
            self.env.close()

    def episode(self, reward_fn: RewardFunction) -> Episode:
        verdict = self.env.verdict(self.final) if self.env is not None else None
        parts, total = reward_fn(self.final, self.reference, verdict)
        if self.hacked:  # the guard's zero_reward policy
            parts, total = dict.fromkeys(parts, 0.0), 0.0
        closed = [*self.closed, (self.trace.segment(), self.msgs)]
        return Episode(
            segments=[seg for seg, _ in closed], rewards=parts, reward=total,
            group_id=self.group_id, finish_reason=self.stop,
            meta={"final": self.final, "messages": self.msgs,
                  "segment_messages": [msgs for _, msgs in closed],
                  "tool_records": self.records, "tool_errors": self.errors,
                  "turns": self.turns, "state_keys": self.state_keys,
                  "step_errors": self.step_errors, "compactions": self.compactions,
                  "branched_at": self.branched_at, "reference": self.reference,
                  "tools": self.tools.schemas(), "guard_flags": self.flags,
                  "guard_blocks": self.blocks,
                  **({"env": self.env.info()} if self.conversation else {})},
        )
