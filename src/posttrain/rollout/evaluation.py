"""Held-out evaluation: mean of every reward part over one sample a problem."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.rewards import RewardFunction
from posttrain.rollout.agent import tool_use_rate
from posttrain.rollout.missing import missing_metrics
from posttrain.rollout.single_turn import rollout
from posttrain.settings import EvalConfig
from posttrain.types import Episode


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
    agent episodes, and ``accuracy/<domain>`` when the tasks span several domains)."""
    sampling = cfg.params((tokenizer.eos_token_id,), seed)
    episodes = rollout_fn(engine, tokenizer, tasks, reward_fn, sampling)
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in reward_fn.weights:
        out[name] = sum(e.rewards[name] for e in episodes) / n
    out["accuracy"] = out[accuracy_part]
    out |= missing_metrics(episodes)
    domains = sorted({d for e in episodes if (d := e.meta.get("domain")) is not None})
    if len(domains) > 1:  # per task domain too
        for d in domains:
            mine = [e.rewards[accuracy_part] for e in episodes if e.meta.get("domain") == d]
            out[f"accuracy/{d}"] = sum(mine) / len(mine)
    if any("tool_records" in e.meta for e in episodes):
        out["tool_use"] = tool_use_rate(episodes)
    return out


def rollout_metrics(episodes: Sequence[Episode], accuracy_part: str) -> dict[str, float]:
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in episodes[0].rewards:
        out[f"reward/{name}"] = sum(e.rewards[name] for e in episodes) / n
    out["accuracy"] = out[f"reward/{accuracy_part}"]
    out["response_length"] = sum(e.segments[0].num_trainable for e in episodes) / n
    out["truncated"] = sum(e.finish_reason in ("length", "max_tokens") for e in episodes) / n
    out |= missing_metrics(episodes)
    if any("tool_records" in e.meta for e in episodes):
        out["tool_use"] = tool_use_rate(episodes)
        for key in ("turns", "compactions", "guard_flags", "guard_blocks"):
            out[key] = sum(e.meta[key] for e in episodes) / n
    return out
