"""The judge ``function``: your own, named by dotted path."""

from __future__ import annotations

from typing import Annotated, Any

from posttrain.config.reward_config import JudgeFamily
from posttrain.settings.extension import extension, load_extension
from posttrain.settings.family import member


@member("judge", "function")
class FunctionJudgeConfig(JudgeFamily):
    """``function``: the dotted path in ``function``, called as ``f(episodes, tasks)`` after
    each rollout: a score or None (unknown) per episode."""

    function: Annotated[str, extension("judge")]

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        return load_extension("judge", self.function)
