"""One episode's running state inside ``AgentLoop``: its turns, tool calls and the segments
that compactions (``compaction.compact``) close, and the snapshots branches start from
(``tree.branch``).

Every step (a sampled turn) records a ``StepSpan`` in its segment, the ``state_key`` of the
context it acted in and whether its tool calls were malformed (``behaviour_reg``'s error
tokens); the three lists stay aligned over the episode's segments.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from posttrain.config.sections.agent import Compaction, LoopLimits
from posttrain.engines import Engine
from posttrain.harness.compaction import compact
from posttrain.harness.context import retain_reasoning
from posttrain.harness.episode_env import EpisodeEnv, is_conversation
from posttrain.harness.guard import BLOCKED, Guard
from posttrain.harness.swarm import Swarm, SwarmSettings
from posttrain.harness.tool_calls import ToolCall, parse_tool_calls, strip_tool_calls
from posttrain.harness.tools import ToolRegistry, ToolResult
from posttrain.harness.trace import Trace
from posttrain.rewards import RewardFunction
from posttrain.types import ChatTemplateError, Episode, SamplingParams, Segment, StepSpan

STOP_REASONS = ("answer", "max_turns", "max_tokens", "timeout", "loop", "tool_errors")
# what a step's snapshot keeps of the episode's counters, and a branch from it restores
COUNTERS = ("turns", "errors", "repeats", "last", "flags", "blocks", "judge_failures", "hacked")


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
    retain_reasoning: str
    swarm: SwarmSettings | None

    def render(self, messages: list[dict], generation_prompt: bool,
               tools: ToolRegistry | None = None) -> str: ...

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Snapshot:
    """The state at the start of a step: lengths of the records and the ``COUNTERS``."""

    segment: int
    ids: int
    text: int
    msgs: int
    records: int
    counters: dict[str, Any]

    @classmethod
    def of(cls, st: EpisodeState) -> Snapshot:
        t = st.trace
        return cls(len(st.closed), len(t.ids), len(t.text), len(st.msgs), len(st.records),
                   {k: getattr(st, k) for k in COUNTERS})


class EpisodeState:
    """``task``: the opening messages; the episode plays from ``task`` (or a branch's prefix)
    with ``tools`` (else the loop's) or, when it has an environment (``make_env()``, else the
    loop's ``env_factory(reference)``), the environment's tools."""

    def __init__(self, loop: LoopView, task: Sequence[dict], reference: str, group_id: str,
                 sampling: SamplingParams, tools: ToolRegistry | None = None,
                 make_env: Callable[[], EpisodeEnv] | None = None) -> None:
        self.loop, self.task, self.reference, self.group_id = loop, list(task), reference, group_id
        self.sampling = sampling
        self.env = make_env() if make_env is not None else (
            loop.env_factory(reference) if loop.env_factory is not None else None)
        own = loop.tools if tools is None else tools
        self.tools = own if self.env is None else self.env.tools
        self.swarm = None if loop.swarm is None else Swarm(
            loop.swarm, loop, sampling, lambda sub, messages: EpisodeState(
                sub, messages, "", "", sampling, loop.swarm.tools, make_env=lambda: None))
        if self.swarm is not None:  # the orchestrator's tools: its own, spawn and wait
            self.tools = ToolRegistry([*self.tools.tools.values(), *self.swarm.tools()],
                                      self.tools.max_output_lines, self.tools.max_output_bytes)
        self.conversation = is_conversation(self.env)
        if self.conversation:
            self.task = [*self.task, *self.env.opening()]
        self.restart(retain_reasoning(self.task, loop.retain_reasoning))
        self.closed: list[tuple[Segment, list[dict]]] = []  # segment, its conversation
        self.stop: str | None = None
        self.final, self.errors, self.repeats, self.last, self.turns = "", 0, 0, None, 0
        self.records: list[dict[str, Any]] = []
        self.state_keys: list[Hashable] = []
        self.step_errors: list[bool] = []
        self.snapshots: dict[int, Snapshot] = {}  # step index -> state before it
        self.flags, self.blocks, self.hacked, self.compactions = 0, 0, False, 0
        self.reasoning_drops, self.judge_failures = 0, 0
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
                compact(self)
            if self.stop is None and self.budget() <= 0:
                self.stop = "max_tokens"
        return self.stop is None

    def add_step(self, out, context: list[dict], trained: bool = True) -> str:
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
        self.snapshots[len(self.state_keys)] = Snapshot.of(self)
        content = self.add_step(out, self.msgs)
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
            self.env.calls_text(strip_tool_calls(content, loop.call_pattern).strip())
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
        elif self.repeats >= limits.loop_repeats:
            self.stop = "loop"
        elif self.conversation and (reason := self.env.stop_reason()):
            self.stop = reason
        else:
            self._observe([{"role": "tool", "content": r.output} for r in results])

    def _answered(self, content: str) -> None:
        """A turn without tool calls: the final answer, or (in a conversation) a message to
        the other party, whose reply continues the episode."""
        message, reason = self.env.reply(content) if self.conversation else (None, "answer")
        if reason is not None:
            self.stop, self.final = reason, content
            return
        self.repeats, self.last = 0, None  # the same call again after a reply is no loop
        self._observe([{"role": "user", "content": message}] if isinstance(message, str)
                      else list(message))

    def _observe(self, messages: list[dict]) -> None:
        """Append observations and the template's scaffold up to the next generation prompt
        (loss mask 0). When the reasoning retention mode drops earlier reasoning (a new user
        turn under ``drop_on_new_user``), earlier turns change: the segment closes after the
        sampled turn and the next one starts from the conversation without that reasoning."""
        mode = self.loop.retain_reasoning
        after = [*self.msgs, *messages]
        kept = after if mode == "keep_all" else retain_reasoning(after, mode)
        if kept != after:
            self.close_segment()
            self.restart(kept)
            self.reasoning_drops += 1
            return
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
            self.judge_failures += v.judge_failed
            self.hacked |= v.confirmed and guard.on_hack == "zero_reward"
        blocked = {v.call_id for v in verdicts if v.blocked}
        ran = iter(self.tools.execute_sync([c for c in calls if c.call_id not in blocked]))
        return [ToolResult(c.call_id, c.name, BLOCKED, BLOCKED, "blocked", 0.0)
                if c.call_id in blocked else next(ran) for c in calls]

    def close_segment(self) -> None:
        self.closed.append((self.trace.segment(), [dict(m) for m in self.msgs]))

    def restart(self, messages: list[dict]) -> None:
        """Continue in a new segment from ``messages`` (rendered to the generation prompt)."""
        self.msgs = messages
        text = self.render(messages, True)
        self.trace = Trace(self.loop.encode(text), text)

    # -- result --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the episode's environment and sub-agents (idempotent)."""
        if self.env is not None:
            self.env.close()
        if self.swarm is not None:
            self.swarm.close()

    def segments(self) -> list[tuple[Segment, list[dict]]]:
        """The episode's own segments so far, each with its conversation."""
        return [*self.closed, (self.trace.segment(), self.msgs)]

    def episode(self, reward_fn: RewardFunction) -> Episode:
        verdict = self.env.verdict(self.final) if self.env is not None else None
        if self.swarm is not None:  # PARL's parts, for reward parts with verifier env
            verdict = {**(verdict or {}), **self.swarm.parts()}
        scored = reward_fn(self.final, self.reference, verdict)
        parts, total = scored.parts, scored.total
        if self.hacked:  # the guard's zero_reward policy
            parts, total = dict.fromkeys(parts, 0.0), 0.0
        closed = self.segments() + (self.swarm.segments() if self.swarm is not None else [])
        return Episode(
            segments=[seg for seg, _ in closed], rewards=parts, reward=total,
            group_id=self.group_id, finish_reason=self.stop,
            meta={"final": self.final, "messages": self.msgs,
                  "segment_messages": [msgs for _, msgs in closed],
                  "tool_records": self.records, "tool_errors": self.errors,
                  "turns": self.turns, "state_keys": self.state_keys,
                  "step_errors": self.step_errors, "compactions": self.compactions,
                  "reasoning_drops": self.reasoning_drops,
                  "branched_at": self.branched_at, "reference": self.reference,
                  "tools": self.tools.schemas(), "guard_flags": self.flags,
                  "guard_blocks": self.blocks, "guard_judge_failures": self.judge_failures,
                  **({"env": self.env.info()} if callable(getattr(self.env, "info", None))
                     else {}),
                  **(self.swarm.meta(self.turns) if self.swarm is not None else {}),
                  **reward_fn.episode_meta(scored)},
        )
