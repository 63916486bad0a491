"""Apply the configured reward-shaping rules to a step's scored episodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from posttrain.algos import LazyInputs, entry, get
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.settings import ShapingRule
from posttrain.types import Episode


def completion_lengths(episodes: Sequence[Episode]) -> torch.Tensor:
    return torch.tensor([sum(s.num_trainable for s in e.segments) for e in episodes])


def shape_rewards(
    episodes: Sequence[Episode],
    rules: Sequence[ShapingRule],
    step: int,
    efforts: Sequence[int] | None = None,
    prompt_budgets: PromptBudgets | None = None,
) -> list[Episode]:
    """Episodes whose ``reward`` went through ``rules`` in order; the unshaped total stays in
    ``meta["raw_reward"]`` and the named parts are unchanged. Each rule takes what it asks
    for (``rewards``, ``lengths`` in completion tokens, ``group_ids``, ``efforts`` and the
    ``effort_grid``, a swarm episode's ``parallel`` and ``finish`` parts, ``budgets`` from
    the rule's ``budget``: one number, or ``auto``, each prompt's own from
    ``prompt_budgets`` at percentile ``rho``; the ``step``) and its declared output is a
    ``bonus`` to add, a ``cost`` to subtract ``coef`` times, or the new ``reward``."""
    if not rules or not episodes:
        return list(episodes)
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float64)
    groups = {g: i for i, g in enumerate(dict.fromkeys(e.group_id for e in episodes))}
    fixed = {
        "lengths": lambda: completion_lengths(episodes),
        "group_ids": lambda: torch.tensor([groups[e.group_id] for e in episodes]),
        "efforts": lambda: torch.tensor([e.meta["effort"] for e in episodes]),
        "effort_grid": lambda: efforts,
        "step": lambda: step,
        **{part: lambda part=part: torch.tensor(  # PARL's parts of a swarm episode (else 0)
            [e.meta.get("parl", {}).get(part, 0.0) for e in episodes], dtype=torch.float64)
           for part in ("parallel", "finish")},
    }
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
    groups = {g: i for i, g in enumerate(dict.fromkeys(e.group_id for e in episodes))}
    keep = get("shaping", "dynamic_sampling")(
        rewards=torch.tensor([e.reward for e in episodes]),
        group_ids=torch.tensor([groups[e.group_id] for e in episodes]))
    return [e for e, k in zip(episodes, keep.tolist()) if k]
