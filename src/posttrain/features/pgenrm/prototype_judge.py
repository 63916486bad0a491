"""The judge ``prototypes``: P-GenRM's user prototypes scoring each answer for its user."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from posttrain.config.family import member
from posttrain.config.sections.reward import LocalJudge


@member("judge", "prototypes")
class PrototypesJudgeConfig(LocalJudge):
    """``prototypes`` (P-GenRM, arXiv 2602.12116): the user prototypes that ``posttrain
    reward-model`` with ``rm.loss: pgenrm_pair`` wrote to ``model`` score each answer
    ``z_t . y`` for its user (``user``, one of the trained users for every task, or the task
    row's ``user_column``). The backbone must share the policy's vocabulary (it reads the
    sampled token ids as they are); a user it was not trained on is an error."""

    user: str | None = Field(None,
                             description="one trained user for every task (or set user_column)")
    user_column: str | None = Field(None, description="the task row's column naming its user")

    @model_validator(mode="after")
    def _one_user(self) -> PrototypesJudgeConfig:
        if (self.user is None) == (self.user_column is None):
            raise ValueError("a prototypes judge needs its user: set one of user (a trained "
                             "user's name for every task) and user_column (the task row's)")
        return self

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.features.pgenrm.judge import PrototypeJudge
        from posttrain.models import check_same_vocabulary, load_model, load_tokenizer
        from posttrain.models.devices import placed
        from posttrain.models.preference_prototypes import UserPreferences
        from posttrain.types import TeacherMismatchError

        check_same_vocabulary(policy_tokenizer, load_tokenizer(self.model), "a prototypes judge")
        prefs = UserPreferences.load(self.model)
        if self.user is not None and self.user not in prefs.users:  # fail before the run
            raise TeacherMismatchError(f"a prototypes judge: {self.user!r} is not one of the "
                                       f"{len(prefs.users)} users trained in {self.model}")
        return PrototypeJudge(placed(load_model(self.model, dtype).eval(), self.device), prefs,
                              policy_tokenizer.pad_token_id, self.user, self.user_column)
