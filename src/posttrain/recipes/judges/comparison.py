"""The judge ``comparison``: a round robin of the group's answers, each pair decided by a
prompted judge (``group_binary_comparison``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.reward import ServedJudge


@member("judge", "comparison")
class ComparisonJudgeConfig(ServedJudge):
    """``comparison``: every pair of the group's answers judged by ``rubric``; an answer over
    ``budget_tokens`` (null: no budget) loses without a comparison."""

    budget_tokens: int | None = Field(
        None, ge=1,
        description="an answer longer than this loses without a comparison (null: no budget)")

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.recipes.judges.chats import ServedChats
        from posttrain.rollout.wrappers.judged import ComparisonJudge, chat_compare

        chat = ServedChats(dtype, seed).chat(self)
        return ComparisonJudge(chat_compare(chat, self.rubric), self.budget_tokens)
