"""Data curation by sampling: keep prompts by pass rate (``posttrain filter-prompts``), keep
the best of k sampled answers as SFT data (``posttrain rejection-sample``), or pair the best
with the worst as preference data (``posttrain pair-sample``: RS-DPO's on-policy pairs).

A prompt's pass rate is the share of its ``k`` samples whose ``accuracy_part`` reward is at least
``pass_at`` (1.0: a verified answer). DeepSeek V3.2 keeps prompts with pass@k > 0 (with k = 100:
``min_pass = 0.01``); the default range, ``0 < p < 1``, keeps prompts that are neither solved
every time nor never — the ones that carry a learning signal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams


@dataclass
class Sampled:
    """A prompt and its ``k`` scored samples."""

    task: Task
    episodes: list[Episode]
    passes: int

    @property
    def pass_rate(self) -> float:
        return self.passes / len(self.episodes)


def sample_prompts(
    engine: Engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction,
    rollout_fn: Callable[..., list[Episode]], k: int, sampling: SamplingParams,
    accuracy_part: str, pass_at: float = 1.0, chunk: int = 16,
) -> Iterator[Sampled]:
    """``k`` samples of every task, ``chunk`` tasks an engine call (yielded as they finish)."""
    for i in range(0, len(tasks), chunk):
        part = list(tasks[i : i + chunk])
        seeded = SamplingParams(**{**sampling.to_dict(), "seed": (sampling.seed or 0) + i})
        episodes = rollout_fn(engine, tokenizer, part, reward_fn, seeded, k)
        for j, task in enumerate(part):
            group = episodes[j * k : (j + 1) * k]
            passes = sum(e.score(accuracy_part) >= pass_at for e in group)
            yield Sampled(task, group, passes)


def in_range(pass_rate: float, min_pass: float | None, max_pass: float | None) -> bool:
    """``min_pass <= p <= max_pass``; an unset bound is exclusive: ``p > 0``, ``p < 1``."""
    low = pass_rate > 0 if min_pass is None else pass_rate >= min_pass - 1e-12
    high = pass_rate < 1 if max_pass is None else pass_rate <= max_pass + 1e-12
    return low and high


def filter_row(s: Sampled) -> dict:
    return {"messages": s.task.messages(), "reference": s.task.reference,
            "pass_rate": s.pass_rate, "passes": s.passes, "k": len(s.episodes)}


def best_row(s: Sampled, threshold: float) -> dict | None:
    """The highest-reward sample as a chat example, if its reward reaches ``threshold``."""
    best = max(s.episodes, key=lambda e: e.reward)
    if not math.isfinite(best.reward) or best.reward < threshold:
        return None
    return {"messages": [*s.task.messages(), reply(best)], "reward": best.reward,
            "pass_rate": s.pass_rate}


def reply(episode: Episode) -> dict:
    """A single-turn episode's completion as the assistant message."""
    return {"role": "assistant", "content": episode.meta["completion"]}


def pair_row(s: Sampled, threshold: float) -> dict | None:
    """The highest-reward sample over the lowest-reward one as a preference pair (TRL's form:
    ``prompt`` messages, ``chosen`` and ``rejected`` one assistant message each), if the best
    reaches ``threshold`` and the worst falls below it; ties go to the earlier sample."""
    rewards = [e.reward for e in s.episodes]
    if not all(math.isfinite(r) for r in rewards):
        return None
    best = max(range(len(rewards)), key=rewards.__getitem__)
    worst = min(range(len(rewards)), key=rewards.__getitem__)
    if rewards[best] < threshold or rewards[worst] >= threshold:
        return None
    return {"prompt": s.task.messages(), "chosen": [reply(s.episodes[best])],
            "rejected": [reply(s.episodes[worst])],
            "chosen_reward": rewards[best], "rejected_reward": rewards[worst],
            "pass_rate": s.pass_rate}
