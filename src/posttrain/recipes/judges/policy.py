"""The judge ``policy``: the policy being trained grades its own answers (``genrm``; the
actor as a generative reward model of DeepSeek-V4, ``actor_as_grm``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from posttrain.config.family import member
from posttrain.config.section import samples_differ
from posttrain.config.sections.features.actor_as_grm import GRADING_RUBRIC
from posttrain.config.sections.reward import JudgeFamily


@member("judge", "policy")
class PolicyJudgeConfig(JudgeFamily):
    """``policy``: after each rollout (and evaluation) the policy itself, on the rollout's
    engine, grades every answer ``n_samples`` times by ``rubric`` on ``0..score_max`` in at
    most ``max_new_tokens`` tokens at ``temperature``; the part is the mean of the grades that
    parse over ``score_max`` (none: unscored). ``rl.actor_as_grm`` trains it to grade."""

    rubric: str = Field(GRADING_RUBRIC, min_length=1, description="the grading rubric")
    n_samples: int = Field(1, ge=1, description="gradings of each answer")
    score_max: float = Field(10.0, gt=0, description="the top of the grading scale 0..score_max")
    max_new_tokens: int = Field(16, ge=1, description="most tokens of a grading")
    temperature: float = Field(0.0, ge=0,
                               description="sampling temperature of the gradings (0: greedy)")

    @model_validator(mode="after")
    def _samples_differ(self) -> PolicyJudgeConfig:
        samples_differ("a policy judge's n_samples", self.n_samples, "temperature",
                       self.temperature)
        return self

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.rollout.wrappers.judged import PolicyJudge

        return PolicyJudge(self.rubric, self.n_samples, self.score_max, self.max_new_tokens,
                           self.temperature, seed)
