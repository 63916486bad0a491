"""The judge ``reward_model``: a Bradley-Terry reward model's scalar head (``posttrain
reward-model``)."""

from __future__ import annotations

from typing import Any

from posttrain.config.family import member
from posttrain.config.sections.reward import LocalJudge


@member("judge", "reward_model")
class RewardModelJudgeConfig(LocalJudge):
    """``reward_model``: each answer's score by the scalar head ``model``, which must share the
    policy's vocabulary (it scores the sampled token ids as they are)."""

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        from posttrain.models import check_same_vocabulary, load_tokenizer, load_value_model
        from posttrain.models.devices import placed
        from posttrain.rollout.wrappers.judged import RewardModelJudge

        check_same_vocabulary(policy_tokenizer, load_tokenizer(self.model), "a reward model")
        return RewardModelJudge(placed(load_value_model(self.model, dtype), self.device),
                                policy_tokenizer.pad_token_id)
