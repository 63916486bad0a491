"""ReMax's baseline rollout: each prompt's greedy decode, scored but never trained on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.rewards import RewardFunction
from posttrain.rollout.single_turn import rollout
from posttrain.types import Episode, SamplingParams


@dataclass(frozen=True)
class GreedyBaseline:
    """``rollout_fn``'s episodes, each with ``meta["baseline_reward"]`` = the reward of its
    prompt's greedy decode (``remax``'s ``R(y_greedy)``; one extra completion a prompt, at
    temperature 0 with the same stop tokens and length). The baseline is the reward function's
    total, before shaping."""

    rollout_fn: Callable[..., list[Episode]] = rollout

    def __call__(self, engine: Engine, tokenizer, tasks: Sequence[Task],
                 reward_fn: RewardFunction, sampling: SamplingParams, group_size: int = 1,
                 group_prefix: str = "") -> list[Episode]:
        episodes = self.rollout_fn(engine, tokenizer, tasks, reward_fn, sampling, group_size,
                                   group_prefix=group_prefix)
        greedy = rollout(engine, tokenizer, tasks, reward_fn,
                         dataclasses.replace(sampling, temperature=0.0), 1, group_prefix)
        baseline = {ep.group_id: ep.reward for ep in greedy}
        for ep in episodes:
            ep.meta["baseline_reward"] = baseline[ep.group_id]
        return episodes
