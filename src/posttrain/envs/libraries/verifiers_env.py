"""verifiers environments (prime-rl's; ``verifiers`` 0.4, ``verifiers.v1``) as a task family
(``task.name: verifiers``): the environment's tasks are the family's, and the environment
plays each episode itself, its harness driving the policy through ``posttrain serve``,
single- or multi-turn, with its tools. Its reward functions' weighted scores are the reward
parts (verifier ``env``).

verifiers pins ``openai`` below 3, which posttrain's own install cannot share, so it runs in
a Python of its own (``python``: a virtual environment with verifiers; default: this one),
through ``runners/verifiers_runner.py`` (the protocol: ``bridge``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.envs.libraries.family import LibraryFamily


@member("task", "verifiers")
class VerifiersConfig(LibraryFamily):
    """``verifiers``: the verifiers environment ``environment`` (its taskset id: a module
    verifiers' loader finds, on ``paths`` or installed), its taskset config ``args`` and agent
    seat ``agent_args`` (default: a local subprocess runtime and posttrain's chat harness,
    unless the environment brings a harness), run by ``python`` (default: this interpreter).
    The reward parts are its reward functions' names, each with verifier ``env``; RL with
    ``rl.mode: sync``."""

    RUNNER: ClassVar[str] = "verifiers_runner.py"
    environment: str = Field(min_length=1, description="the verifiers environment's taskset id")
    args: dict[str, Any] = Field(default_factory=dict, description="the taskset's config")
    agent_args: dict[str, Any] = Field(
        default_factory=dict,
        description="the agent seat's config (default: a local runtime and posttrain's harness)")
    paths: list[str] = Field(default_factory=list,
                             description="folders searched for the environment's module")

    def spec(self) -> dict:
        return {"id": self.environment, "args": self.args, "agent": self.agent_args,
                "paths": self.paths}
