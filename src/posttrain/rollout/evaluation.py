"""Held-out evaluation: the mean of every reward part over ``eval.samples`` samples a
problem, pass@k/maj@k/mean@k with ``samples > 1``, breakdowns by dataset column, and what the
features measure of the engine (hook ``engine_metrics``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.algos.metrics import standard_error
from posttrain.config import EvalConfig
from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.hooks import NO_SETTINGS, RolloutView, hooked
from posttrain.models import stop_tokens
from posttrain.rewards import RewardFunction
from posttrain.rollout.sample_metrics import sample_metrics
from posttrain.rollout.scoring import (
    feature_metrics,
    harness_metrics,
    missing_metrics,
    tool_use,
)
from posttrain.rollout.single_turn import rollout
from posttrain.types import Episode


def evaluate(engine: Engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
             cfg: EvalConfig, accuracy_part: str, seed: int = 0,
             rollout_fn: Callable[..., list[Episode]] = rollout,
             features: Mapping[str, Any] = NO_SETTINGS
             ) -> tuple[list[Episode], dict[str, float]]:
    """``eval_episodes`` and their ``eval_metrics`` (the features' with their settings,
    ``features``), with what the features measured of ``engine`` while it played them (hook
    ``engine_metrics``)."""
    measuring = [m for measure in hooked("engine_metrics") if (m := measure(engine)) is not None]
    episodes = eval_episodes(engine, tokenizer, tasks, reward_fn, cfg, seed, rollout_fn)
    metrics = eval_metrics(episodes, tasks, reward_fn, cfg, accuracy_part, features)
    for measured in measuring:
        metrics |= measured()
    return episodes, metrics


def eval_episodes(engine: Engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
                  cfg: EvalConfig, seed: int = 0,
                  rollout_fn: Callable[..., list[Episode]] = rollout) -> list[Episode]:
    """``cfg.samples`` scored episodes of each task, task ``k``'s at ``[k n, (k+1) n)``."""
    sampling = cfg.params(stop_tokens(tokenizer), seed)
    return rollout_fn(engine, tokenizer, tasks, reward_fn, sampling, cfg.samples)


def eval_metrics(episodes: Sequence[Episode], tasks: Sequence[Task], reward_fn: RewardFunction,
                 cfg: EvalConfig, accuracy_part: str,
                 features: Mapping[str, Any] = NO_SETTINGS) -> dict[str, float]:
    """``{"accuracy", "reward", <part>...}`` averaged over every sample and ``accuracy_se``,
    the accuracy's binomial standard error over the problems (plus ``tool_use`` for agent
    episodes offered a tool, and ``accuracy/<domain>`` when the tasks span several domains);
    with ``cfg.samples > 1``, ``sample_metrics``; for each column of ``cfg.group_by``, the
    accuracy (and the largest ``pass@k``) of each of its values, ``<metric>/<column>=<value>``.
    """
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in dict.fromkeys([*reward_fn.weights, *(k for e in episodes for k in e.rewards)]):
        out[name] = sum(e.score(name) for e in episodes) / n  # (also a feature's own part)
    out["accuracy"] = out[accuracy_part]
    per_problem = per_task(episodes, cfg.samples)
    out["accuracy_se"] = standard_error(min(max(out["accuracy"], 0.0), 1.0), len(per_problem))
    out |= missing_metrics(episodes)
    domains = sorted({d for e in episodes if (d := e.meta.get("domain")) is not None})
    if len(domains) > 1:  # per task domain too
        for d in domains:
            mine = [e.score(accuracy_part) for e in episodes if e.meta.get("domain") == d]
            out[f"accuracy/{d}"] = sum(mine) / len(mine)
    out |= tool_use(episodes)
    out |= feature_metrics(RolloutView(episodes, (), features)) | harness_metrics(
        episodes, accuracy_part)
    if cfg.samples > 1:
        out |= sample_metrics(per_problem, accuracy_part, cfg.pass_ks())
    for column in cfg.group_by:
        by_value: dict[str, list[int]] = {}
        for k, task in enumerate(tasks):
            by_value.setdefault(str(column_of(task, column)), []).append(k)
        for value, ks in sorted(by_value.items()):
            mine = [e for k in ks for e in per_problem[k]]
            out[f"accuracy/{column}={value}"] = \
                sum(e.score(accuracy_part) for e in mine) / len(mine)
            if cfg.samples > 1:
                k = max(cfg.pass_ks())
                out[f"pass@{k}/{column}={value}"] = sample_metrics(
                    [per_problem[i] for i in ks], accuracy_part, [k])[f"pass@{k}"]
    return out


def absent_columns(tasks: Sequence[Task], columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``columns`` (``eval.group_by``) that no task has, and the columns they do have (a
    dataset row's, and ``domain`` where tasks carry one)."""
    have = sorted({c for t in tasks for c in getattr(t, "row", {})} |
                  {"domain" for t in tasks if getattr(t, "domain", None) is not None})
    return [c for c in columns if c not in have], have


def column_of(task: Task, column: str):
    """A task's value of ``column``: its dataset row's, else its attribute (``domain``), else
    None."""
    row = getattr(task, "row", {})
    return row[column] if column in row else getattr(task, column, None)


def per_task(episodes: Sequence[Episode], samples: int) -> list[Sequence[Episode]]:
    """Each task's episodes: ``samples`` in a row a task (``eval_episodes``' order)."""
    return [episodes[k:k + samples] for k in range(0, len(episodes), samples)]


def pass_rates(episodes: Sequence[Episode], samples: int, accuracy_part: str) -> list[float]:
    """Each task's mean ``accuracy_part`` over its ``samples`` episodes."""
    return [sum(e.score(accuracy_part) for e in mine) / len(mine)
            for mine in per_task(episodes, samples)]
