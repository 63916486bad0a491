"""Rollouts through the agent loop: the multi-turn counterpart of ``rollout``, with the same
signature, so the RL loop and evaluation take either."""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.harness import AgentLoop, LoopLimits, ToolRegistry
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


class AgentRollout:
    """``group_size`` agent episodes per task, played in lockstep; the per-turn token budget is
    ``sampling.max_new_tokens``."""

    def __init__(self, tools: ToolRegistry, limits: LoopLimits = LoopLimits()) -> None:
        self.tools, self.limits = tools, limits

    def __call__(
        self,
        engine: Engine,
        tokenizer,
        tasks: Sequence[Task],
        reward_fn: RewardFunction,
        sampling: SamplingParams,
        group_size: int = 1,
        group_prefix: str = "",
    ) -> list[Episode]:
        limits = LoopLimits(**{**self.limits.__dict__, "max_new_tokens": sampling.max_new_tokens})
        loop = AgentLoop(engine, tokenizer, self.tools, limits)
        items = [(t.messages(), t.reference, f"{group_prefix}{k}")
                 for k, t in enumerate(tasks) for _ in range(group_size)]
        return loop.run_many(items, sampling, reward_fn)


def tool_use_rate(episodes: Sequence[Episode]) -> float:
    """Share of episodes that made at least one tool call without an error."""
    def used(e: Episode) -> bool:
        return any(not err for r in e.meta.get("tool_records", []) for err in r["errors"])

    return sum(used(e) for e in episodes) / max(len(episodes), 1)
