"""One tau-bench conversation inside the agent loop (TAU_ENV.md §7): the harness's
``AgentLoop`` samples the agent's turns (exact tokens, loss mask on the agent's own tokens);
this environment runs the agent's tool calls on the live path, hands its texts to the
simulated user, records the trajectory in the specification's message format, applies the
step and error limits, and scores the trajectory at the end."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.envs.tau.environment import Message, build
from posttrain.envs.tau.scoring import Chat, InfrastructureError, TauScore, score
from posttrain.envs.tau.tasks import TauTask
from posttrain.envs.tau.user import UserSimulator, stop_token
from posttrain.harness import Tool, ToolCall, ToolRegistry, ToolResult, format_tool_call

GREETING = "Hi! How can I help you today?"
TAU_PARTS = ("tau", "success")  # the verdict: reward, and whether it is 1
AGENT_STOP = "###STOP###"
AGENT_PROMPT = """You are a customer-service agent. Help the user as the policy below allows.
In each turn either write one message to the user or call tools, never both. Look records up
with the tools instead of guessing, and confirm with the user before you change anything.

<policy>
{policy}
</policy>"""
SOLO_PROMPT = """

No user is present. Resolve the ticket below on your own with the tools (the customer's own
device tools included) and call `done` when it is resolved; a message without tool calls ends
the conversation as an error.

<ticket>
{ticket}
</ticket>"""


@dataclass(frozen=True)
class TauLimits:
    """``max_steps`` steps (a message of the agent or the user, or one round of tool results);
    ``max_errors`` tool errors (agent and user, in all, not in a row — as tau2 counts)."""

    max_steps: int = 200
    max_errors: int = 10


@dataclass(frozen=True)
class TauScoring:
    """``basis`` overrides each task's reward basis; ``judge`` scores ``NL_ASSERTION`` (without
    one that component is reported unavailable)."""

    basis: tuple[str, ...] | None = None
    judge: Chat | None = None


def agent_prompt(policy: str, ticket: str | None = None) -> str:
    """The agent's system prompt; with a ``ticket``, the solo-mode prompt."""
    solo = "" if ticket is None else SOLO_PROMPT.format(ticket=ticket)
    return AGENT_PROMPT.format(policy=policy) + solo


def done() -> str:
    """Declare the ticket resolved; this ends the conversation.

    Returns:
        A confirmation.
    """
    return "Done."


def agent_view(trajectory: Sequence[Message]) -> list[dict]:
    """What the agent sees (§7.3), as chat messages: the user's texts, its own messages (calls
    as Hermes blocks) and the results of its own calls."""
    out = []
    for m in trajectory:
        if m["role"] == "user" and not m.get("tool_calls"):
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            out.append({"role": "assistant",
                        "content": (m.get("content") or "") + "".join(
                format_tool_call(c["name"], c["arguments"]) for c in m.get("tool_calls") or [])})
        elif m["role"] == "tool" and m.get("requestor", "assistant") == "assistant":
            out.append({"role": "tool", "content": m["content"]})
    return out


def user_view(trajectory: Sequence[Message]) -> list[dict]:
    """What the user sees: the agent's texts, its own messages and its own calls' results."""
    return [m for m in trajectory if (m["role"] == "assistant" and not m.get("tool_calls"))
            or m["role"] == "user" or (m["role"] == "tool" and m.get("requestor") == "user")]


class TauTools(ToolRegistry):
    """The agent's tools of one episode: the domain toolkit's (in solo mode also the user's and
    ``done``), run in order on the episode's environment (§1.1) and recorded in its trajectory."""

    def __init__(self, episode: TauEpisode) -> None:
        toolkits = episode.env.toolkits
        specs = list(toolkits["assistant"].tools.values())
        if episode.solo and toolkits["user"] is not None:
            specs += list(toolkits["user"].tools.values())
        super().__init__([Tool(s.fn) for s in specs] + ([Tool(done)] if episode.solo else []))
        self.episode = episode

    async def execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        return self.episode.agent_calls(calls)


class TauEpisode:
    """The ``ConversationEnv`` of one task: ``user`` plays the customer, ``limits`` bound the
    conversation, ``scoring`` decides the reward parts ``tau`` and ``success``. Without a
    user the episode is in solo mode: the agent works the task's ticket (in its system prompt)
    with its own and the user's tools and ends it with ``done``."""

    def __init__(self, task: TauTask, domain_name: str, user: UserSimulator | None,
                 limits: TauLimits = TauLimits(), scoring: TauScoring = TauScoring()) -> None:
        self.task, self.domain_name, self.user = task, domain_name, user
        self.solo = user is None
        self.limits, self.scoring = limits, scoring
        self.env = build(task, domain_name)
        state = task.initial_state
        self.trajectory: list[Message] = [dict(m) for m in (state.message_history if state
                                                             else None) or []]
        self.steps = self.errors = 0
        self.termination: str | None = None
        self.result: TauScore | None = None
        self.infrastructure_error: str | None = None
        self._calls_text: str | None = None
        self.tools = TauTools(self)

    # -- the conversation ------------------------------------------------------------------
    def opening(self) -> list[dict]:
        """The agent's view before its first turn: the greeting and the user's first message, or
        the task's history continued to the agent's turn (§7.2); in solo mode the history alone."""
        if not self.solo:
            if not self.trajectory:
                self.trajectory.append({"role": "assistant", "content": GREETING,
                                        "tool_calls": None})
            last = self.trajectory[-1]  # its calls, if any, have results (strict replay)
            if (last["role"] == "assistant" and not last.get("tool_calls")) or (
                    last["role"] == "tool" and last.get("requestor") == "user"):
                self._user_turn()
        return agent_view(self.trajectory)

    def reply(self, text: str) -> tuple[str | None, str | None]:
        """The agent wrote ``text`` to the user: the user's answer, or why the episode ends
        (in solo mode a text turn is an ``agent_error``, as is a blank one)."""
        self._record({"role": "assistant", "content": text, "tool_calls": None})
        if self.solo or not text.strip():
            self.termination = "agent_error"
        elif AGENT_STOP in text:
            self.termination = "agent_stop"
        if self._stopped():
            return None, self.termination
        message = self._user_turn()
        return (None, self.termination) if self.termination else (message, None)

    def stop_reason(self) -> str | None:
        return self.termination

    def calls_text(self, text: str) -> None:
        """The text of the coming tool-call turn (kept in its trajectory message)."""
        self._calls_text = text or None

    def agent_calls(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run the agent's calls in order; malformed ones answer with their parse error and are
        recorded without a name (nothing to replay or match). In solo mode a user tool runs as
        the user's call and ``done`` ends the episode."""
        requestors = [self._requestor(c.name) for c in calls]
        self._record({"role": "assistant", "content": self._calls_text, "tool_calls": [
            {"id": c.call_id, "name": None if c.error else c.name, "arguments": c.arguments,
             "requestor": r, **({"malformed": c.error} if c.error else {})}
            for c, r in zip(calls, requestors)]})
        self._calls_text = None
        results = []
        for c, requestor in zip(calls, requestors):
            start = time.perf_counter()
            if c.error is not None:
                content, error = f"Error: {c.error}", True
            elif self.solo and c.name == "done":
                content, error, self.termination = done(), False, "agent_stop"
            else:
                msg = self.env.execute(c.call_id, c.name, c.arguments, requestor)
                content, error = msg.content, msg.error
            self._tool_message(c.call_id, content, requestor, error)
            outcome = ("format" if c.error else "failed") if error else "ok"
            results.append(ToolResult(c.call_id, c.name, content, content, outcome,
                                      time.perf_counter() - start))
        self.steps += 1  # the environment's step
        self._stopped()
        return results

    def _requestor(self, name: str | None) -> str:
        user = self.env.toolkits["user"]
        agent_tools = self.env.toolkits["assistant"].tools
        own = name in agent_tools or user is None or name not in user.tools
        return "assistant" if not self.solo or own else "user"

    def _user_turn(self) -> str | None:
        """The user acts until it writes text (its tool calls run on the way); returns the text, or
        None when the conversation ended: a stop token (``user_stop``), a message with neither text
        nor calls (``user_error``), a failed simulator (``infrastructure_error``) or a limit."""
        while True:
            try:
                message = self.user.respond(user_view(self.trajectory))
            except Exception as e:  # the endpoint or model serving the user failed
                self.termination = "infrastructure_error"
                self.infrastructure_error = f"the user simulator failed: {e!r}"
                return None
            self._record(message)
            calls, content = message.get("tool_calls"), message.get("content") or ""
            if not calls:
                if stop_token(content):
                    self.termination = "user_stop"
                elif not content.strip():
                    self.termination = "user_error"
                return None if self._stopped() else content
            for c in calls:
                if c.get("malformed"):
                    self._tool_message(c["id"], f"Error: {c['malformed']}", "user", True)
                    continue
                msg = self.env.execute(c["id"], c["name"], c["arguments"], "user")
                self._tool_message(c["id"], msg.content, "user", msg.error)
            self.steps += 1
            if self._stopped():
                return None

    def _record(self, message: Message) -> None:
        self.trajectory.append(message)
        self.steps += 1

    def _tool_message(self, call_id: str, content: str, requestor: str, error: bool) -> None:
        self.trajectory.append({"role": "tool", "id": call_id, "content": content,
                                "requestor": requestor, "error": error})
        self.errors += error

    def _stopped(self) -> bool:
        """Apply the limits after a step whose next recipient is not the environment."""
        if self.termination is None:
            if self.steps >= self.limits.max_steps:
                self.termination = "max_steps"
            elif self.errors >= self.limits.max_errors:
                self.termination = "too_many_errors"
        return self.termination is not None

    # -- the end ---------------------------------------------------------------------------
    def verdict(self, final: str) -> dict[str, float]:
        """``tau``: the reward; ``success``: whether it is 1. An episode the agent loop ended
        (turns, tokens, time) did not finish: reward 0. An infrastructure error scores 0 here
        and is named in ``info`` so that metrics leave it out."""
        try:
            self.result = score(self.task, self.domain_name, self.trajectory,
                                self.termination or "agent_error", self.scoring.basis,
                                self.scoring.judge)
        except Exception as e:  # never the end of a run: recorded, left out of metrics
            self.infrastructure_error = (str(e) if isinstance(e, InfrastructureError)
                                         else f"scoring failed: {e!r}")
            return {"tau": 0.0, "success": 0.0}
        return {"tau": self.result.reward, "success": float(self.result.success)}

    def info(self) -> dict:
        return {"task_id": self.task.id, "domain": self.domain_name,
                "termination": self.termination, "trajectory": self.trajectory,
                **{k: getattr(self.result, k, None)  # None before scoring
                   for k in ("reward", "components", "basis", "unavailable")},
                "infrastructure_error": self.infrastructure_error}

    def close(self) -> None:
        """Nothing to release (the databases are plain objects)."""
