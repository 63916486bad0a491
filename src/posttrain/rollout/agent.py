"""Rollouts through the agent loop: the multi-turn counterpart of ``rollout``, with the same
signature, so the RL loop and evaluation take either."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from posttrain.config import Compaction, LoopLimits
from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.harness import (
    AgentLoop,
    EpisodeEnv,
    EpisodeItem,
    Guard,
    ToolRegistry,
    run_tree,
)
from posttrain.rewards import RewardFunction
from posttrain.rollout.scoring import fill_missing
from posttrain.types import Episode, SamplingParams


def observation_state(messages: list[dict]) -> tuple:
    """The default ``state_key``: what the environment has shown (every message but the
    policy's own and the harness's injected ones, such as a compaction's summary), so steps
    that saw the same task and the same tool results share a state."""
    return tuple((m["role"], m["content"]) for m in messages
                 if m["role"] != "assistant" and not m.get("injected"))


class AgentRollout:
    """``group_size`` agent episodes per task, played in lockstep; the per-turn token budget is
    ``sampling.max_new_tokens``. With ``tree=(branches, rounds)`` a group is
    ``group_size / (rounds * branches + 1)`` trees (``tree_grpo``); ``env_factory`` gives each
    episode its own environment made from its reference, ``task_env`` one made from its task
    (the episode then opens with the environment's ``opening()`` alone), ``task_tools`` the
    tool set of its task (else ``tools``); ``guard`` inspects every call and
    ``retain_reasoning`` keeps or drops earlier reasoning when a new user turn arrives; ``loop``:
    further keywords of the ``AgentLoop`` (the features' ``agent_options``), which refuses what
    does not go with them."""

    def __init__(self, tools: ToolRegistry, limits: LoopLimits = LoopLimits(),
                 compaction: Compaction = Compaction(),
                 state_key: Callable[[list[dict]], Hashable] = observation_state,
                 tree: tuple[int, int] | None = None,
                 env_factory: Callable[[str], EpisodeEnv] | None = None,
                 guard: Guard | None = None, retain_reasoning: str = "keep_all",
                 task_env: Callable[[Task], EpisodeEnv] | None = None,
                 task_tools: Callable[[Task], ToolRegistry] | None = None,
                 **loop: Any) -> None:
        if tree is not None and (env_factory is not None or task_env is not None):
            raise ValueError("tree rollouts cannot branch episodes that own environment state")
        if env_factory is not None and task_env is not None:
            raise ValueError("an episode's environment comes from env_factory or task_env, "
                             "not both")
        self.tools, self.limits, self.compaction = tools, limits, compaction
        self.state_key, self.tree, self.env_factory = state_key, tree, env_factory
        self.guard, self.retain_reasoning = guard, retain_reasoning
        self.task_env, self.task_tools, self.loop = task_env, task_tools, loop

    def __call__(self, engine: Engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
                 sampling: SamplingParams, group_size: int = 1, group_prefix: str = ""
                 ) -> list[Episode]:
        limits = replace(self.limits, max_new_tokens=sampling.max_new_tokens)
        loop = AgentLoop(engine, tokenizer, self.tools, limits, state_key=self.state_key,
                         guard=self.guard, compaction=self.compaction, env_factory=self.env_factory,
                         retain_reasoning=self.retain_reasoning, **self.loop)
        tree = self.tree if group_size > 1 else None  # evaluation plays single episodes
        per_tree = 1 if tree is None else tree[0] * tree[1] + 1
        if group_size % per_tree:
            raise ValueError(f"group_size {group_size} is not a multiple of the "
                             f"{per_tree} episodes of a tree")
        per_task = group_size // per_tree
        items = [self.item(t, f"{group_prefix}{k}") for k, t in enumerate(tasks)
                 for _ in range(per_task)]
        episodes = loop.run_many(items, sampling, reward_fn) if tree is None else run_tree(
            loop, items, sampling, reward_fn, *tree, seed=sampling.seed or 0)
        fill_missing(episodes, reward_fn)
        return episodes

    def item(self, task: Task, group_id: str) -> EpisodeItem:
        """The loop's item of one episode of ``task``."""
        tools = None if self.task_tools is None else self.task_tools(task)
        if self.task_env is None:
            return EpisodeItem(task.messages(), task.reference, group_id, tools)
        return EpisodeItem([], task.reference, group_id, tools, partial(self.task_env, task))
