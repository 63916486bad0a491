"""Verifier in the loop: a ``submit`` tool runs public checks and returns their feedback; hidden
checks on the last submission decide the reward. Submissions are capped, and each one after
the first costs ``penalty``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ConfigDict

from posttrain.config.section import described


@dataclass(frozen=True)
class SubmissionPolicy:
    __pydantic_config__ = ConfigDict(extra="forbid")  # as a config section: no unknown keys

    max_submissions: int = described(3, "most submissions an episode")
    penalty: float = described(0.1, "reward lost per submission after the first")

    def __post_init__(self) -> None:
        if self.max_submissions < 1 or self.penalty < 0:
            raise ValueError(f"need max_submissions >= 1 and penalty >= 0, got "
                             f"{self.max_submissions}, {self.penalty}")


class SubmissionLimit(RuntimeError):
    """A submission past the cap: the model reads it as the tool's error."""


class Submissions:
    """One episode's submissions. ``public(solution) -> feedback`` is what the model reads;
    ``hidden(solution) -> parts`` scores the last submission (all zeros when there is none)."""

    def __init__(self, public: Callable[[str], str], hidden: Callable[[str], dict[str, float]],
                 hidden_parts: tuple[str, ...], policy: SubmissionPolicy = SubmissionPolicy()):
        self.public, self.hidden, self.hidden_parts, self.policy = (
            public, hidden, hidden_parts, policy)
        self.count, self.last = 0, None

    def submit(self, solution: str) -> str:
        if self.count >= self.policy.max_submissions:
            raise SubmissionLimit(f"the limit of {self.policy.max_submissions} submissions is "
                                  "reached; the last one is scored")
        self.count, self.last = self.count + 1, solution
        return f"submission {self.count}/{self.policy.max_submissions}: {self.public(solution)}"

    def verdict(self) -> dict[str, float]:
        """The hidden parts of the last submission and ``submissions = -penalty * extra``."""
        parts = (self.hidden(self.last) if self.last is not None
                 else dict.fromkeys(self.hidden_parts, 0.0))
        return {**parts, "submissions": 0.0 - self.policy.penalty * max(self.count - 1, 0)}

    def tool(self) -> Callable[[str], str]:
        """The ``submit`` tool bound to these submissions."""

        def submit(solution: str) -> str:
            """Submit your solution; the public tests run on it and report back.

            Args:
                solution: The complete Python source of the solution module.
            """
            return self.submit(solution)

        return submit
