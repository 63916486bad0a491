"""An external agent, ``agent(base_url, api_key, task) -> reward | None``, and how it runs.

``command_agent(cmd)`` is an agent that runs a program: the task as JSON on its stdin,
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` set,
and its reward (if any) as the last line of its output: a number, or a JSON object of reward
parts (``{"correct": 1.0, "format": 0.1}``; their sum is the reward). ``start`` runs an agent
in a thread of its own that never holds up the process's exit (an agent that hangs is
abandoned, not joined).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from posttrain.envs import Task
from posttrain.envs.base import task_payload

AgentFn = Callable[[str, str, Task], Any]


def command_agent(command: str, timeout_s: float = 600.0) -> AgentFn:
    """An agent that is a program (see the module's docstring)."""
    def agent(base_url: str, api_key: str, task: Task) -> float | dict | None:
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key,
               "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"), "ANTHROPIC_API_KEY": api_key}
        done = subprocess.run(shlex.split(command), input=json.dumps(task_payload(task)), env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{command!r} exited with {done.returncode}: "
                               f"{done.stderr.strip()[-500:]}")
        return reported(done.stdout)
    return agent


def reported(output: str) -> float | dict | None:
    """The reward a program's ``output`` ends with: the last line as a number, or as a JSON
    object of numbers (reward parts); None when it is neither (a non-finite number is
    treated the same, by the rollout)."""
    last = (output.strip().splitlines() or [""])[-1]
    try:
        return float(last)
    except ValueError:
        pass
    try:
        parts = json.loads(last)
    except ValueError:
        return None
    numbers = isinstance(parts, dict) and parts and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in parts.values())
    return parts if numbers else None  # a JSON object of other things is no reward


def start(agent: AgentFn, base_url: str, api_key: str, task: Task) -> Future:
    """``agent(base_url, api_key, task)`` running in a daemon thread; its result or error."""
    future: Future = Future()

    def play() -> None:
        try:
            future.set_result(agent(base_url, api_key, task))
        except BaseException as exc:  # the rollout records it on the episode
            future.set_exception(exc)

    threading.Thread(target=play, daemon=True, name="posttrain-agent").start()
    return future
