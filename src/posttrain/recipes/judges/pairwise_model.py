"""The judge ``pairwise_model``: the round robin of ``comparison`` decided by a pairwise
classifier (``posttrain reward-model`` with ``rm.loss: pairwise_classifier``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.reward import LocalJudge


@member("judge", "pairwise_model")
class PairwiseModelJudgeConfig(LocalJudge):
    """``pairwise_model``: every pair of the group's answers decided by the classifier
    ``model``; an answer over ``budget_tokens`` (null: no budget) loses without one."""

    budget_tokens: int | None = Field(
        None, ge=1,
        description="an answer longer than this loses without a comparison (null: no budget)")

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.models import load_tokenizer, load_value_model
        from posttrain.models.devices import placed
        from posttrain.rollout.wrappers.judged import ClassifierCompare, ComparisonJudge

        compare = ClassifierCompare(placed(load_value_model(self.model, dtype), self.device),
                                    load_tokenizer(self.model))
        return ComparisonJudge(compare, self.budget_tokens)
