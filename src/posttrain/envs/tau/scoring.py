"""The reward of a tau-bench trajectory (TAU_ENV.md §9): the product of the components in the
task's reward basis, after a termination check.

- ``DB``: the agent and user database hashes after replaying the trajectory's writes equal
  those after the gold actions (both from the task's initial state).
- ``ENV_ASSERTION``: every assertion helper, run on the replayed state, returns its
  ``assert_value`` (a raising helper is unmet).
- ``COMMUNICATE``: every required string appears (case-insensitive) in some assistant text
  with its commas removed.
- ``ACTION``: every gold action is matched by some call of the trajectory on its ``compare_args``.
- ``NL_ASSERTION``: a judge (any chat function) says every assertion is met. Without a judge the
  component is *unavailable*: the reward is the product of the others, and ``TauScore``
  names what was left out; with no other, the reward is 0 (an empty product would pass a task
  whose basis is only ``NL_ASSERTION`` for doing nothing: ``posttrain env audit`` found it).

A trajectory that does not replay to its own recorded results, or a judge reply that does not
parse, is an infrastructure error: no reward, excluded from the metrics."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from posttrain.envs.tau.environment import Message, ReplayMismatch, TauEnvironment, build
from posttrain.envs.tau.tasks import BASES, Action, Criteria, TauTask

Chat = Callable[[Sequence[list[dict]]], list[str]]
FINISHED = ("user_stop", "agent_stop")
JUDGE_SYSTEM = (
    "You check a customer-service conversation against expected outcomes. For each expected "
    "outcome decide from the conversation alone whether it was met, with one sentence of "
    "reasoning. Answer with JSON only: "
    '{"results": [{"expectedOutcome": "...", "reasoning": "...", "metExpectation": true}]}, '
    "one entry per expected outcome, in order.")


class InfrastructureError(RuntimeError):
    """The episode cannot be scored (excluded from metrics, never scored 0)."""


@dataclass
class TauScore:
    """``reward`` = product of ``components`` (each in [0, 1]); ``basis`` the components
    computed, ``unavailable`` those of the task's basis that could not be."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    basis: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return abs(self.reward - 1.0) <= 1e-6


def gold_environment(task: TauTask, domain_name: str) -> TauEnvironment:
    """The task's initial state with every gold action executed in order by its requestor,
    errors ignored, without sync between actions (§9.1)."""
    env = build(task, domain_name)
    for a in _criteria(task).actions or []:
        env.execute(a.action_id, a.name, a.arguments, a.requestor, sync=False)
    return env


_GOLD_HASHES: dict[tuple[str, str], tuple[str | None, str | None]] = {}


def gold_hashes(task: TauTask, domain_name: str) -> tuple[str | None, str | None]:
    """The gold target's database hashes (deterministic, so kept per task)."""
    key = (domain_name, task.model_dump_json())
    if key not in _GOLD_HASHES:
        _GOLD_HASHES[key] = gold_environment(task, domain_name).hashes()
    return _GOLD_HASHES[key]


def predicted_environment(task: TauTask, domain_name: str,
                          trajectory: Sequence[Message]) -> TauEnvironment:
    """The initial state without the history, then the whole trajectory (which begins with the
    history) replayed strictly."""
    env = build(task, domain_name, history=False)
    try:
        env.replay(trajectory)
    except ReplayMismatch as e:
        raise InfrastructureError(f"task {task.id}: {e}") from e
    return env


def _criteria(task: TauTask) -> Criteria:
    return task.evaluation_criteria or Criteria()


def db_component(task: TauTask, domain_name: str, predicted: TauEnvironment) -> float:
    c = _criteria(task)
    if c.actions is None and c.env_assertions is None:
        return 1.0
    return float(predicted.hashes() == gold_hashes(task, domain_name))


def env_assertion_component(task: TauTask, predicted: TauEnvironment) -> tuple[float, list]:
    """1 if every assertion holds; also the unmet assertions' helper names."""
    unmet = []
    for a in _criteria(task).env_assertions or []:
        try:
            result = predicted.function(a.env_type, a.func_name)(**a.arguments)
        except Exception:  # tau2 aborts here; an assertion that cannot run is not met
            result = None
        if not isinstance(result, bool) or result != a.assert_value:
            unmet.append(a.func_name)
    return float(not unmet), unmet


def communicate_component(task: TauTask, trajectory: Sequence[Message]) -> float:
    texts = [m["content"].lower().replace(",", "") for m in trajectory
             if m.get("role") == "assistant" and (m.get("content") or "").strip()]
    return float(all(any(s.lower() in t for t in texts)
                     for s in _criteria(task).communicate_info or []))


def action_matches(action: Action, name: str, arguments: dict) -> bool:
    """Same name, and equal arguments on ``compare_args`` (or on the call's own argument names
    when unset): extra call arguments fail, gold-only ones are ignored."""
    keys = action.compare_args if action.compare_args is not None else list(arguments)
    return name == action.name and ({k: arguments.get(k) for k in keys}
                                    == {k: action.arguments.get(k) for k in keys})


def action_component(task: TauTask, trajectory: Sequence[Message]) -> tuple[float, list]:
    """1 if every gold action is matched by some call (any requestor); also the unmatched ids."""
    calls = [(c["name"], c.get("arguments") or {})
             for m in trajectory for c in m.get("tool_calls") or []]
    missed = [a.action_id or a.name for a in _criteria(task).actions or []
              if not any(action_matches(a, n, args) for n, args in calls)]
    return float(not missed), missed


def judge_request(trajectory: Sequence[Message], assertions: Sequence[str]) -> list[dict]:
    lines = "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in trajectory)
    outcomes = "\n".join(f"- {a}" for a in assertions)
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Conversation:\n{lines}\n\nExpected outcomes:\n"
                                        f"{outcomes}"}]


def parse_judgement(text: str, n: int) -> list[bool]:
    """The ``metExpectation`` flags of a judge reply; raises ``InfrastructureError`` if the
    reply is not the JSON asked for with ``n`` results."""
    match = re.search(r"\{.*\}", text or "", re.DOTALL)
    try:
        results = json.loads(match.group(0))["results"] if match else None
        flags = [r["metExpectation"] for r in results]
    except (ValueError, KeyError, TypeError) as e:
        raise InfrastructureError(f"the judge's reply does not parse: {e}") from e
    if len(flags) != n or not all(isinstance(f, bool) for f in flags):
        raise InfrastructureError(f"the judge returned {len(flags)} verdicts for {n} assertions")
    return flags


def nl_assertion_component(task: TauTask, trajectory: Sequence[Message], judge: Chat) -> float:
    assertions = _criteria(task).nl_assertions or []
    if not assertions:
        return 1.0
    (reply,) = judge([judge_request(trajectory, assertions)])
    return float(all(parse_judgement(reply, len(assertions))))


def score(task: TauTask, domain_name: str, trajectory: Sequence[Message], termination: str,
          basis: Sequence[str] | None = None, judge: Chat | None = None) -> TauScore:
    """The reward of ``trajectory`` (which begins with the task's message history) under ``basis``
    (default: the task's own). Raises ``InfrastructureError`` when it cannot be scored."""
    if termination not in FINISHED:
        return TauScore(0.0, details={"termination": termination})
    if task.evaluation_criteria is None:
        return TauScore(1.0)
    wanted = list(basis if basis is not None else task.evaluation_criteria.reward_basis)
    if unknown := set(wanted) - set(BASES):
        raise ValueError(f"unknown reward basis {sorted(unknown)}; known: {', '.join(BASES)}")
    unavailable = [b for b in wanted if b == "NL_ASSERTION" and judge is None]
    used = [b for b in wanted if b not in unavailable]
    parts: dict[str, float] = {}
    details: dict = {}
    predicted = (predicted_environment(task, domain_name, trajectory)
                 if {"DB", "ENV_ASSERTION"} & set(used) else None)
    for b in used:
        if b == "DB":
            parts[b] = db_component(task, domain_name, predicted)
        elif b == "ENV_ASSERTION":
            parts[b], details["unmet_assertions"] = env_assertion_component(task, predicted)
        elif b == "COMMUNICATE":
            parts[b] = communicate_component(task, trajectory)
        elif b == "ACTION":
            parts[b], details["unmatched_actions"] = action_component(task, trajectory)
        else:
            parts[b] = nl_assertion_component(task, trajectory, judge)
    reward = math.prod(parts.values()) if parts else 0.0  # nothing scored: nothing earned
    return TauScore(reward, parts, used, unavailable, details)
