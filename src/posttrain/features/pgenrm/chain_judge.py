"""The judge ``pgenrm``: a personalised generative reward model's evaluation chains."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from posttrain.config.family import member
from posttrain.config.section import samples_differ
from posttrain.config.sections.reward import JudgeFamily
from posttrain.config.served import ServedModel


@member("judge", "pgenrm")
class PGenRMJudgeConfig(JudgeFamily, ServedModel):
    """``pgenrm`` (P-GenRM, arXiv 2602.12116): a chat model (``model`` or ``endpoint``)
    writes the evaluation chain (persona, core preference, weighted criteria, final score on
    ``0..score_max``) for each answer, ``n_samples`` times for its user (``user``, one profile
    for every task, or the task row's ``user_column``) and once for each similar user's
    profile in the row's ``similar_column``; the part is the mean of the two means of the
    chains that parse (none: unscored)."""

    n_samples: int = Field(1, ge=1, description="evaluation chains an answer for its user")
    score_max: float = Field(10.0, gt=0, description="the top of the scoring scale 0..score_max")
    max_new_tokens: int = Field(128, ge=1, description="most tokens of an evaluation chain")
    user: str | None = Field(None,
                             description="one user profile for every task (or set user_column)")
    user_column: str | None = Field(None,
                                    description="the task row's column holding its user's profile")
    similar_column: str | None = Field(
        None, description="the task row's column holding similar users' profiles (null: none)")

    @model_validator(mode="after")
    def _one_user(self) -> PGenRMJudgeConfig:
        self.served_once("a pgenrm judge")
        if (self.user is None) == (self.user_column is None):
            raise ValueError("a pgenrm judge needs its user: set one of user (a profile for "
                             "every task) and user_column (the task row's)")
        samples_differ("a pgenrm judge's n_samples", self.n_samples, "temperature",
                       self.temperature)
        return self

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.features.pgenrm.judge import PGenRMJudge
        from posttrain.recipes.judges.chats import ServedChats

        return PGenRMJudge(ServedChats(dtype, seed).chat(self), self.n_samples, self.score_max,
                           self.user, self.user_column, self.similar_column)
