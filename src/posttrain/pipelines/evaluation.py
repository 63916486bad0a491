"""Held-out evaluation: mean of every reward part over one sample a problem."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.pipelines.agent_rollout import tool_use_rate
from posttrain.pipelines.rollout import rollout
from posttrain.pipelines.settings import EvalConfig
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


def evaluate(
    engine: Engine,
    tokenizer,
    tasks: Sequence[Task],
    reward_fn: RewardFunction,
    cfg: EvalConfig,
    accuracy_part: str,
    seed: int = 0,
    rollout_fn: Callable[..., list[Episode]] = rollout,
) -> dict[str, float]:
    """``{"accuracy", "reward", <part>...}`` averaged over ``tasks`` (plus ``tool_use`` for
    agent episodes)."""
    sampling = SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
        stop_token_ids=(tokenizer.eos_token_id,), seed=seed,
    )
    episodes = rollout_fn(engine, tokenizer, tasks, reward_fn, sampling)
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in reward_fn.weights:
        out[name] = sum(e.rewards[name] for e in episodes) / n
    out["accuracy"] = out[accuracy_part]
    if any("tool_records" in e.meta for e in episodes):
        out["tool_use"] = tool_use_rate(episodes)
    return out
