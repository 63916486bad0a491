"""What a rollout does with its scored episodes besides playing them: reward parts left
missing are filled from their group, the shaping rules reshape the rewards, groups that carry
no signal are told apart (``informative``), and a rollout's metrics.

Reward parts left missing (a judge without a parsable verdict, a reward function that failed,
a reference ``math`` cannot parse) are never scored 0 silently: ``meta["missing_parts"]``
names the part, the part takes the mean of its group's scored samples (so a failure gives no
advantage either way; 0 when none in the group was scored), and the metrics count the misses
(``reward/<part>/missing``) for every part that can be missing (``meta["fallible_parts"]``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from posttrain.algos import LazyInputs, entry, get, group_index
from posttrain.config import ShapingRule
from posttrain.hooks import NO_SETTINGS, RolloutView, hooked
from posttrain.rewards import RewardFunction
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.types import Episode


def groups(episodes: Sequence[Episode]) -> dict[str, list[int]]:
    """Row indices of each group, in order."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, ep in enumerate(episodes):
        out[ep.group_id].append(i)
    return dict(out)


def fill_missing(episodes: Sequence[Episode], reward_fn: RewardFunction) -> None:
    """Every missing part takes its group's mean over the episodes that have it; each
    total is recomputed with ``reward_fn``'s weights."""
    for rows in groups(episodes).values():
        missing = {p for r in rows for p in episodes[r].meta.get("missing_parts", ())}
        for part in missing:
            known = [episodes[r].rewards[part] for r in rows
                     if part not in episodes[r].meta.get("missing_parts", ())]
            fill = statistics.fmean(known) if known else 0.0
            for r in rows:
                if part in episodes[r].meta.get("missing_parts", ()):
                    episodes[r].rewards[part] = fill
        if missing:
            for r in rows:
                episodes[r].reward = reward_fn.total(episodes[r].rewards)


def missing_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """``reward/<part>/missing``: the share of episodes that left ``part`` unscored, for
    every part that can be missing."""
    parts = episodes[0].meta.get("fallible_parts", ()) if episodes else ()
    return {f"reward/{part}/missing": sum(part in e.meta.get("missing_parts", ())
                                          for e in episodes) / len(episodes)
            for part in parts}


# -- reward shaping ----------------------------------------------------------------------
def completion_lengths(episodes: Sequence[Episode]) -> torch.Tensor:
    return torch.tensor([sum(s.num_trainable for s in e.segments) for e in episodes])


def shape_rewards(episodes: Sequence[Episode], rules: Sequence[ShapingRule], step: int,
                  prompt_budgets: PromptBudgets | None = None,
                  given: Mapping[str, Any] = NO_SETTINGS) -> list[Episode]:
    """Episodes whose ``reward`` went through ``rules`` in order; the unshaped total stays in
    ``meta["raw_reward"]`` and the named parts are unchanged. Each rule takes what it asks
    for (``rewards``, ``lengths`` in completion tokens, ``group_ids``, the values ``given``
    (the run's features offer them), what the features' ``shaping_inputs`` offer, ``budgets``
    from the rule's ``budget``: one number, or ``auto``, each prompt's own from
    ``prompt_budgets`` at percentile ``rho``; the ``step``) and its declared output is a
    ``bonus`` to add, a ``cost`` to subtract ``coef`` times, or the new ``reward``."""
    if not rules or not episodes:
        return list(episodes)
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float64)
    fixed = {
        "lengths": lambda: completion_lengths(episodes),
        "group_ids": lambda: group_index(e.group_id for e in episodes),
        "step": lambda: step,
        **{name: lambda value=value: value for name, value in given.items()},
    }
    for offered in hooked("shaping_inputs"):
        fixed |= offered(episodes)
    for rule in rules:
        shaping, opts = entry("shaping", rule.name), rule.options()
        coef, budget = opts.pop("coef", None), opts.pop("budget", None)
        rho = opts.pop("rho", 50)
        current = {"rewards": lambda r=rewards: r}
        if budget == "auto":  # each prompt's own
            if prompt_budgets is None:
                raise ValueError(f"shaping {rule.name!r} with budget auto needs prompt_budgets")
            current["budgets"] = lambda rho=rho: prompt_budgets.budgets(episodes, rho, step)
        elif budget is not None:  # one budget for all prompts
            current["budgets"] = lambda r=rewards, b=float(budget): torch.full_like(r, b)
        value = shaping.call(LazyInputs(**fixed, **current), **opts)
        if shaping.output == "bonus":
            rewards = rewards + value
        elif shaping.output == "cost":
            rewards = rewards - coef * value
        else:
            rewards = value
    return [dataclasses.replace(e, reward=float(r), meta={**e.meta, "raw_reward": e.reward})
            for e, r in zip(episodes, rewards.tolist())]


def informative(episodes: list[Episode]) -> list[Episode]:
    """The episodes of groups whose rewards are not all equal (``dynamic_sampling``)."""
    if not episodes:
        return []
    keep = get("shaping", "dynamic_sampling")(
        rewards=torch.tensor([e.reward for e in episodes]),
        group_ids=group_index(e.group_id for e in episodes))
    return [e for e, k in zip(episodes, keep.tolist()) if k]


# -- a rollout's metrics -------------------------------------------------------------------
def set_aside(episode: Episode) -> bool:
    """Whether a feature sets ``episode`` aside: not the task's (``set_aside`` hooks)."""
    return any(aside(episode) for aside in hooked("set_aside"))


def rollout_metrics(episodes: Sequence[Episode], accuracy_part: str,
                    features: Mapping[str, Any] = NO_SETTINGS) -> dict[str, float]:
    """The step's means over its task episodes (those no feature sets aside), then the
    features' own ``rollout_metrics`` (with their settings, ``features``) and each
    harness's."""
    flags = [set_aside(e) for e in episodes]  # asked once an episode
    aside = [e for e, f in zip(episodes, flags) if f]
    episodes = [e for e, f in zip(episodes, flags) if not f]
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in dict.fromkeys(k for e in episodes for k in e.rewards):
        out[f"reward/{name}"] = sum(e.score(name) for e in episodes) / n
    out["accuracy"] = sum(e.score(accuracy_part) for e in episodes) / n
    out["response_length"] = sum(e.segments[0].num_trainable for e in episodes) / n
    out["truncated"] = sum(e.finish_reason in ("length", "max_tokens") for e in episodes) / n
    out |= missing_metrics(episodes)
    looped = [e for e in episodes if "tool_records" in e.meta]  # the built-in loop's
    out |= tool_use(looped)
    if looped:
        for key in ("turns", "compactions", "guard_flags", "guard_blocks", "guard_judge_failures"):
            out[key] = sum(e.meta[key] for e in looped) / len(looped)
    return out | feature_metrics(RolloutView(episodes, aside, features)) | harness_metrics(
        episodes, accuracy_part)


def feature_metrics(rollout: RolloutView) -> dict[str, float]:
    """What the features report of ``rollout``."""
    out: dict[str, float] = {}
    for metrics in hooked("rollout_metrics"):
        out |= metrics(rollout)
    return out


def harness_metrics(episodes: Sequence[Episode], accuracy_part: str) -> dict[str, float]:
    """Per harness of ``agent.harnesses`` (``meta["harness"]``): ``harness/<name>/share``
    of the episodes, its mean ``reward`` and ``accuracy``; nothing for other episodes."""
    names = sorted({h for e in episodes if (h := e.meta.get("harness")) is not None})
    out = {}
    for name in names:
        mine = [e for e in episodes if e.meta.get("harness") == name]
        out[f"harness/{name}/share"] = len(mine) / len(episodes)
        out[f"harness/{name}/reward"] = statistics.fmean(e.reward for e in mine)
        out[f"harness/{name}/accuracy"] = statistics.fmean(e.score(accuracy_part)
                                                           for e in mine)
    return out


def tool_use_rate(episodes: Sequence[Episode]) -> float:
    """Share of episodes that made at least one tool call without an error."""
    def used(e: Episode) -> bool:
        return any(not err for r in e.meta.get("tool_records", []) for err in r["errors"])

    return sum(used(e) for e in episodes) / max(len(episodes), 1)


def tool_use(episodes: Sequence[Episode]) -> dict[str, float]:
    """``{"tool_use": tool_use_rate}`` over the built-in loop's episodes that were offered a
    tool; nothing when none was (a task without tools has no rate to report, not 0)."""
    offered = [e for e in episodes if e.meta.get("tools")]
    return {"tool_use": tool_use_rate(offered)} if offered else {}
