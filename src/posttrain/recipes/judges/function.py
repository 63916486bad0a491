"""The judge ``function``: your own, named by dotted path."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from posttrain.config.extension import extension, load_extension
from posttrain.config.family import member
from posttrain.config.sections.reward import JudgeFamily


@member("judge", "function")
class FunctionJudgeConfig(JudgeFamily):
    """``function``: the dotted path in ``function``, called as ``f(episodes, tasks)`` after
    each rollout: a score or None (unknown) per episode."""

    function: Annotated[str, extension("judge")] = Field(
        description="f(episodes, tasks) by dotted path: a score or None per episode")

    def build(self, policy_tokenizer: Any, dtype: str, seed: int) -> Any:
        return load_extension("judge", self.function)
