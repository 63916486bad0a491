"""Generate completions for tasks and score them into ``Episode``s."""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.engines import Engine, GenerationOutput
from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.types import Episode, SamplingParams, Segment


def completion_text(tokenizer, out: GenerationOutput) -> str:
    """The completion as text, special tokens (eos, pad) removed."""
    return tokenizer.decode(out.token_ids, skip_special_tokens=True)


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
    episodes = []
    for j, out in enumerate(outs):
        task = tasks[j // group_size]
        text = completion_text(tokenizer, out)
        parts, total = reward_fn(text, task.reference)
        segment = Segment.from_prompt_completion(
            out.prompt_ids, out.token_ids, out.logprobs, version=out.version
        )
        episodes.append(
            Episode(
                segments=[segment], rewards=parts, reward=total,
                group_id=f"{group_prefix}{j // group_size}", finish_reason=out.finish_reason,
                meta={"completion": text, "reference": task.reference,
                      "effort": getattr(task, "effort", None)},
            )
        )
    return episodes
