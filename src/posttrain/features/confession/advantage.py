"""The confessions' own advantage on their tokens, in an RL update."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain.algos import get, group_index
from posttrain.config.sections.reward import CONFESSION_PART
from posttrain.hooks import UpdateView
from posttrain.train.rl_update import episode_rows, step_tokens
from posttrain.types import Batch, Episode


def confession_tokens(episodes: Sequence[Episode], batch: Batch) -> torch.Tensor:
    """``[B, T]``: 1 on the tokens of each confessing episode's confession, its last step
    (``rollout``)."""
    last = [torch.tensor([0.0] * (n - 1) + [float("confession" in ep.meta)])
            for ep in episodes for n in [sum(len(s.steps) for s in ep.segments)]]
    return step_tokens(last, episodes, batch)


def confessed(episode: Episode) -> bool:
    """Whether ``episode`` confessed and its confession was scored: the others stay out of
    their group's confession statistics."""
    return "confession" in episode.meta and \
        CONFESSION_PART not in episode.meta.get("missing_parts", ())


def confession_advantages(adv: torch.Tensor, update: UpdateView) -> torch.Tensor:
    """``adv`` with each confession's tokens on the confession's own group-relative
    advantage, when any episode confessed."""
    batch, episodes = update.batch, update.episodes
    if not any("confession" in ep.meta for ep in episodes):
        return adv
    return get("advantage", "confession")(
        advantages=adv, confession_mask=confession_tokens(episodes, batch),
        confession_rewards=torch.tensor([ep.rewards.get(CONFESSION_PART, 0.0)
                                         for ep in episodes], dtype=torch.float64),
        group_ids=group_index([ep.group_id if confessed(ep) else ("alone", k)
                               for k, ep in enumerate(episodes)]),
        rows=episode_rows(episodes))
