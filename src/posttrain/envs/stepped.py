"""An ``Environment`` (``reset(task)``, ``step(action)``; a user's class named by
``task.env``) played as one agent-loop episode: the loop's per-episode ``ConversationEnv``.

The episode opens with what ``reset(task)`` returns. Every turn of the policy without tool
calls is an action: ``step(text)`` answers with a ``StepResult``; ``done`` ends the episode
(stop reason ``answer``, the text is the final answer the verifiers score), otherwise its
``observation`` messages are appended and the policy goes on. Tool calls are run by the loop
with the episode's tools (the task's, plus the environment's own ``tools`` attribute, if any).
The reward parts of the steps are summed; a part with verifier ``env`` takes its sum."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from posttrain.harness import ToolRegistry

OPENING_ROLES = ("system", "user", "assistant", "tool")
OBSERVATION_ROLES = ("system", "user", "tool")


class SteppedEpisode:
    """One episode of ``env`` (a fresh instance) on ``task``. ``tools``: the task's tools (the
    environment's own are added); ``parts``: the reward parts with verifier ``env``, each of
    which a finished episode's steps must have reported (an unfinished one scores 0 on those
    it lacks); ``name`` names the environment in errors (its ``task.env`` path)."""

    def __init__(self, env: Any, task: Any, tools: ToolRegistry, parts: Sequence[str] = (),
                 name: str = "") -> None:
        self.env, self.task, self.parts = env, task, tuple(parts)
        self.name = name or type(env).__name__
        self.tools = ToolRegistry([*tools.tools.values()], tools.max_output_lines,
                                  tools.max_output_bytes)
        for fn in _own_tools(env):
            if getattr(fn, "__name__", None) in self.tools.tools:
                raise ValueError(f"task.env {self.name}: its tool {fn.__name__!r} is also a "
                                 "tool of the task (agent.tools)")
            self.tools.add(fn)
        self.done, self.steps, self.reward = False, 0, 0.0
        self.totals: dict[str, float] = {}
        self.last_info: dict = {}

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.env, method)(*args)
        except Exception as e:
            raise RuntimeError(f"task.env {self.name}: {method} raised "
                               f"{type(e).__name__}: {e}") from e

    def opening(self) -> list[dict]:
        return _messages(self._call("reset", self.task), OPENING_ROLES,
                         f"task.env {self.name}: reset(task)")

    def reply(self, text: str) -> tuple[list[dict] | None, str | None]:
        result = self._call("step", text)
        where = f"task.env {self.name}: step(action)"
        for attr in ("observation", "reward_parts", "reward", "done"):
            if not hasattr(result, attr):
                raise TypeError(f"{where} returned a {type(result).__name__} without "
                                f"{attr!r}; return a posttrain.envs.StepResult")
        self.steps += 1
        self.reward += _number(result.reward, f"{where}: reward")
        for part, value in dict(result.reward_parts or {}).items():
            self.totals[part] = self.totals.get(part, 0.0) + _number(
                value, f"{where}: reward_parts[{part!r}]")
        self.last_info = dict(getattr(result, "info", None) or {})
        if result.done:
            self.done = True
            return None, "answer"
        return _messages(result.observation, OBSERVATION_ROLES, where), None

    def calls_text(self, text: str) -> None:
        pass

    def stop_reason(self) -> str | None:
        return None

    def info(self) -> dict:
        return {"env": self.name, "steps": self.steps, "done": self.done, "reward": self.reward,
                "reward_parts": dict(self.totals), "info": self.last_info}

    def verdict(self, final: str) -> dict[str, float]:
        missing = [p for p in self.parts if p not in self.totals]
        if self.done and missing:
            raise ValueError(f"task.env {self.name}: reward parts {missing} (verifier env) were "
                             f"never reported in a step's reward_parts (it reported "
                             f"{sorted(self.totals) or 'none'})")
        return {**dict.fromkeys(self.parts, 0.0), **self.totals}

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _own_tools(env: Any) -> list:
    own = getattr(env, "tools", None)
    return list(own.tools.values()) if isinstance(own, ToolRegistry) else list(own or [])


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{where} is {value!r}, not a finite number")
    return float(value)


def _messages(value: Any, roles: tuple[str, ...], where: str) -> list[dict]:
    """``value`` checked as a non-empty list of chat messages, each a role of ``roles`` and text."""
    if not isinstance(value, list) or not value:
        raise TypeError(f"{where} returned {value!r}, not a non-empty list of chat messages")
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in roles \
                or not isinstance(m.get("content"), str):
            raise TypeError(f"{where} returned the message {m!r}: a message needs a role in "
                            f"{roles} and string content")
    return [dict(m) for m in value]
