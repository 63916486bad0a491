"""``behaviour_reg``'s two rules on an RL update."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posttrain.algos import get, group_index, long_success_penalty
from posttrain.hooks import UpdateView
from posttrain.train.rl_update import episode_rows, per_episode, step_tokens
from posttrain.types import Batch, Episode


def long_success_rewards(rewards: torch.Tensor, update: UpdateView) -> torch.Tensor:
    """The per-episode ``rewards`` after the reward rule (lengths in trainable tokens), when
    it is on."""
    batch, episodes, algo = update.batch, update.episodes, update.algo
    rule = algo.behaviour_reg.reward_rule() if algo.behaviour_reg else None
    if rule is None:
        return rewards
    rows, n = episode_rows(episodes), len(episodes)
    return long_success_penalty(
        rewards=rewards, lengths=per_episode(batch.loss_mask.sum(dim=1), rows, n),
        group_ids=group_index(ep.group_id for ep in episodes), **rule)


def error_tokens(episodes: Sequence[Episode], batch: Batch) -> torch.Tensor:
    """``[B, T]``: 1 on the tokens of steps whose tool calls were malformed."""
    flags = [torch.tensor(ep.meta["step_errors"], dtype=torch.float32) for ep in episodes]
    return step_tokens(flags, episodes, batch)


def error_advantages(adv: torch.Tensor, update: UpdateView) -> torch.Tensor:
    """``adv`` after the token rule on the malformed steps' tokens."""
    batch, episodes, algo = update.batch, update.episodes, update.algo
    if algo.behaviour_reg is None:
        return adv
    return get("advantage", "behaviour_reg")(
        advantages=adv, error_mask=error_tokens(episodes, batch),
        **algo.behaviour_reg.token_rule())
