"""Agent swarms (Kimi K2.5's PARL): an orchestrator episode gets two more tools.
``spawn(task)`` starts a sub-agent on the same engine, with a context of its own (the
sub-agent prompt and ``task``) and the sub-agent tools; ``wait(handles)`` plays the named
sub-agents that are still running to their ends, all of them batched in each generate call,
and returns each one's final answer (or why it stopped). Each sub-agent's segments join the
orchestrator's episode as rows of their own (trained with the episode's advantage; with
``token_mean`` the number of rows does not reweight episodes, docs/agents.md).

The cost is the critical path, not the sum: ``critical_steps`` = the orchestrator's turns plus,
for each ``wait``, the most turns any sub-agent it played took. PARL's reward parts:
``parallel`` = min(spawned, ``target``) / ``target`` (instantiation: against serial
collapse) and ``finish`` = sub-agents that answered / spawned (0 with none)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from posttrain.config.sections.agent import SUBAGENT_PROMPT, LoopLimits
from posttrain.harness.tools import Tool, ToolRegistry
from posttrain.types import SamplingParams, Segment

SWARM_ALONE = ("a swarm's sub-agents share the task's tools: no trees, no per-episode "
               "environments")  # what a loop with a swarm refuses


@dataclass(frozen=True)
class SwarmSettings:
    """``tools``: the sub-agents' (no spawn: sub-agents do not spawn); at most
    ``max_subagents`` per episode, each within ``limits``; ``target``: the sub-agents that
    earn the whole ``parallel`` part."""

    tools: ToolRegistry
    max_subagents: int = 8
    limits: LoopLimits = LoopLimits(max_turns=4)
    prompt: str = SUBAGENT_PROMPT
    target: int = 4

    def __post_init__(self) -> None:
        if self.max_subagents < 1 or self.target < 1:
            raise ValueError(f"a swarm needs max_subagents >= 1 and target >= 1, got "
                             f"{self.max_subagents}, {self.target}")


def swarm_tools(spawn: Callable[[str], str], wait: Callable[[list[str]], str],
                timeout: float = 10.0) -> list[Tool]:
    """The orchestrator's ``spawn`` and ``wait`` tools, answered by ``spawn`` and ``wait``.
    ``spawn`` is a coroutine tool: a turn's calls run concurrently, and a sync tool's thread
    could take the lock out of turn, so handles would not follow the calls' order; coroutines
    start in call order on the event loop and ``spawn`` never awaits."""
    async def spawn_(task: str) -> str:
        """Start a sub-agent on a task of its own; it runs when you wait for it.

        Args:
            task: Everything the sub-agent needs to know: it sees nothing else.
        """
        return spawn(task)

    def wait_(handles: list[str]) -> str:
        """Run the named sub-agents to their ends (in parallel) and read their answers.

        Args:
            handles: The handles spawn returned.
        """
        return wait(handles)

    spawn_.__name__, wait_.__name__ = "spawn", "wait"
    return [Tool(spawn_), Tool(wait_, timeout=timeout)]


class Swarm:
    """The sub-agents of one orchestrator episode, played by ``loop`` (an ``AgentLoop``);
    ``start(loop, messages)`` makes a sub-agent's episode state (an ``EpisodeState`` of the
    sub-agents' loop, with the sub-agent tools)."""

    def __init__(self, settings: SwarmSettings, loop: Any, sampling: SamplingParams,
                 start: Callable[[Any, list[dict]], Any]) -> None:
        self.settings, self.sampling, self.start = settings, sampling, start
        self.loop = copy.copy(loop)  # the sub-agents' loop: their limits, no swarm, no env
        self.loop.limits = replace(settings.limits, max_new_tokens=loop.limits.max_new_tokens)
        self.loop.swarm, self.loop.env_factory = None, None
        self.agents: dict[str, Any] = {}
        self.waits: list[int] = []  # per wait: the most turns a sub-agent it played took
        self._lock = threading.Lock()  # a turn's calls run concurrently (ToolRegistry)

    def tools(self) -> list[Tool]:
        return swarm_tools(self.spawn, self.wait, self.settings.limits.timeout_s * 2)

    def spawn(self, task: str) -> str:
        messages = [{"role": "system", "content": self.settings.prompt},
                    {"role": "user", "content": task}]
        with self._lock:
            if len(self.agents) >= self.settings.max_subagents:
                return (f"not spawned: the limit of {self.settings.max_subagents} sub-agents "
                        "is reached")
            handle = f"agent-{len(self.agents) + 1}"
            self.agents[handle] = self.start(self.loop, messages)
        return f"spawned {handle}"

    def wait(self, handles: list[str]) -> str:
        """Play the known ``handles``' sub-agents that still run; a line per handle (an
        unknown one says which handles exist)."""
        known = [h for h in dict.fromkeys(handles) if h in self.agents]
        with self._lock:  # two waits in one turn: each plays its own, one after the other
            if running := [self.agents[h] for h in known if self.agents[h].stop is None]:
                self.loop.play(running, self.sampling)
                self.waits.append(max(st.turns for st in running))
        spawned = ", ".join(self.agents) or "none"
        return "\n".join(self._report(h) if h in self.agents
                         else f"{h}: unknown handle (spawned: {spawned})"
                         for h in dict.fromkeys(handles)) or f"no handles (spawned: {spawned})"

    def _report(self, handle: str) -> str:
        st = self.agents[handle]
        return f"{handle}: {st.final.strip()}" if st.stop == "answer" else \
            f"{handle}: no answer ({st.stop})"

    def segments(self) -> list[tuple[Segment, list[dict]]]:
        """Every sub-agent's segments with their conversations, in spawn order."""
        return [seg for st in self.agents.values() for seg in st.segments()]

    def parts(self) -> dict[str, float]:
        """PARL's ``parallel`` and ``finish`` reward parts."""
        n = len(self.agents)
        finished = sum(st.stop == "answer" for st in self.agents.values())
        return {"parallel": min(n, self.settings.target) / self.settings.target,
                "finish": finished / n if n else 0.0}

    def meta(self, orchestrator_turns: int) -> dict[str, Any]:
        return {"subagents": len(self.agents), "parl": self.parts(),
                "subagent_turns": [st.turns for st in self.agents.values()],
                "critical_steps": orchestrator_turns + sum(self.waits),
                "total_steps": orchestrator_turns + sum(st.turns for st in self.agents.values())}

    def close(self) -> None:
        for st in self.agents.values():
            st.close()
