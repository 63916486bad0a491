"""Held-out evaluation: mean of every reward part over one sample a problem."""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.pipelines.rollout import rollout
from posttrain.pipelines.settings import EvalConfig
from posttrain.rewards import RewardFunction
from posttrain.types import SamplingParams


def evaluate(
    engine: Engine,
    tokenizer,
    tasks: Sequence[Task],
    reward_fn: RewardFunction,
    cfg: EvalConfig,
    accuracy_part: str,
    seed: int = 0,
) -> dict[str, float]:
    """``{"accuracy", "reward", <part>...}`` averaged over ``tasks``."""
    sampling = SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
        stop_token_ids=(tokenizer.eos_token_id,), seed=seed,
    )
    episodes = rollout(engine, tokenizer, tasks, reward_fn, sampling)
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in reward_fn.weights:
        out[name] = sum(e.rewards[name] for e in episodes) / n
    out["accuracy"] = out[accuracy_part]
    return out
