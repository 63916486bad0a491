"""The judge ``score``: a prompted grader (``genrm``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.reward import ServedJudge


@member("judge", "score")
class ScoreJudgeConfig(ServedJudge):
    """``score``: ``n_samples`` gradings of each answer by ``rubric`` on ``0..score_max``, their
    mean over ``score_max`` (unparsable gradings left out; none: the answer is unscored)."""

    n_samples: int = Field(1, ge=1, description="gradings of each answer, averaged")
    score_max: float = Field(10.0, gt=0, description="the top of the grading scale 0..score_max")

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.recipes.judges.chats import ServedChats
        from posttrain.rollout.wrappers.judged import ScoreJudge

        return ScoreJudge(ServedChats(dtype, seed).chat(self), self.rubric, self.n_samples,
                          self.score_max)
