"""Generate completions for tasks and score them into ``Episode``s."""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams, Segment


def rollout(
    engine: Engine,
    tokenizer,
    tasks: Sequence[Task],
    reward_fn: RewardFunction,
    sampling: SamplingParams,
    group_size: int = 1,
    group_prefix: str = "",
) -> list[Episode]:
    """``group_size`` scored episodes per task; episodes of task ``k`` share group ``prefix-k``.

    An empty completion is kept (the segment has no trainable token) and scores 0.
    """
    prompts = [encode_prompt(tokenizer, t.messages()) for t in tasks]
    outs = engine.generate([p for p in prompts for _ in range(group_size)], sampling)
    return [
        score_sample(tokenizer, tasks[j // group_size], reward_fn, out.prompt_ids, out.token_ids,
                     out.logprobs, out.version, out.finish_reason,
                     f"{group_prefix}{j // group_size}")
        for j, out in enumerate(outs)
    ]


def score_sample(
    tokenizer,
    task: Task,
    reward_fn: RewardFunction,
    prompt_ids: list[int],
    token_ids: list[int],
    logprobs: list[float],
    versions: int | list[int],
    finish_reason: str,
    group_id: str,
) -> Episode:
    """One scored single-turn episode (``versions``: one, or one per completion token)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    parts, total = reward_fn(text, task.reference)
    segment = Segment.from_prompt_completion(prompt_ids, token_ids, logprobs, version=versions)
    return Episode(
        segments=[segment], rewards=parts, reward=total, group_id=group_id,
        finish_reason=finish_reason,
        meta={"completion": text, "reference": task.reference,
              "effort": getattr(task, "effort", None), "domain": getattr(task, "domain", None)},
    )
