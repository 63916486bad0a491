"""Apply the configured reward-shaping rules to a step's scored episodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from posttrain.algos import get
from posttrain.settings import ShapingRule
from posttrain.types import Episode


def completion_lengths(episodes: Sequence[Episode]) -> torch.Tensor:
    return torch.tensor([sum(s.num_trainable for s in e.segments) for e in episodes])


def shape_rewards(
    episodes: Sequence[Episode],
    rules: Sequence[ShapingRule],
    step: int,
    efforts: Sequence[int] | None = None,
) -> list[Episode]:
    """Episodes whose ``reward`` went through ``rules`` in order; the unshaped total stays in
    ``meta["raw_reward"]`` and the named parts are unchanged."""
    if not rules or not episodes:
        return list(episodes)
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float64)
    lengths = completion_lengths(episodes)
    groups = {g: i for i, g in enumerate(dict.fromkeys(e.group_id for e in episodes))}
    group_ids = torch.tensor([groups[e.group_id] for e in episodes])
    for rule in rules:
        fn, opts = get("shaping", rule.name), rule.options()
        if rule.name == "dapo_overlong":
            rewards = rewards + fn(lengths=lengths, **opts)
        elif rule.name == "effort_length_penalty":
            levels = torch.tensor([e.meta["effort"] for e in episodes])
            rewards = rewards + fn(lengths=lengths, efforts=levels, effort_grid=efforts, **opts)
        elif rule.name == "budget_penalty":
            budgets = torch.full_like(rewards, float(opts.pop("budget")))
            rewards = fn(rewards=rewards, lengths=lengths, budgets=budgets, **opts)
        elif rule.name == "toggle":
            budgets = torch.full_like(rewards, float(opts.pop("budget")))
            rewards = fn(rewards=rewards, lengths=lengths, group_ids=group_ids, budgets=budgets,
                         step=step, **opts)
        elif rule.name == "concave_length_penalty":
            coef = opts.pop("coef")
            rewards = rewards - coef * fn(x=lengths.to(torch.float64), **opts)
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
