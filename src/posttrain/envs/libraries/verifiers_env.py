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
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.libraries.bridge import LibraryAgent, LibraryTasks

RUNNER = "verifiers_runner.py"


@member("task", "verifiers")
class VerifiersConfig(TaskFamily):
    """``verifiers``: the verifiers environment ``environment`` (its taskset id: a module
    verifiers' loader finds, on ``paths`` or installed), its taskset config ``args`` and agent
    seat ``agent_args`` (default: a local subprocess runtime and posttrain's chat harness,
    unless the environment brings a harness), run by ``python`` (default: this interpreter).
    The reward parts are its reward functions' names, each with verifier ``env``; RL with
    ``rl.mode: sync``."""

    GENERATED: ClassVar[bool] = False
    PARTS_FROM_ENV: ClassVar[bool] = True
    environment: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    agent_args: dict[str, Any] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    python: str | None = None

    def check(self, cfg) -> None:
        super().check(cfg)
        other = sorted(n for n, p in cfg.reward.parts.items() if p.verifier != "env")
        if other:
            raise ValueError(f"task.name=verifiers: the environment's reward functions score "
                             f"the episodes; reward.parts {', '.join(other)} need verifier env "
                             "(and the functions' names)")
        if "rl" in cfg.stages and cfg.rl.mode != "sync":
            raise ValueError("task.name=verifiers plays with rl.mode=sync")
        agent = cfg.agent
        loop = [what for what, on in (
            ("agent.tools", bool(agent.tools)), ("agent.tree", agent.tree is not None),
            ("agent.swarm", agent.swarm is not None), ("agent.guard", agent.guard is not None),
            ("agent.harnesses", bool(agent.harnesses)), ("an external agent", agent.any_external),
            ("agent.compaction", agent.compaction.strategy != "none")) if on]
        if loop:
            raise ValueError(f"task.name=verifiers: the environment's harness plays the "
                             f"episodes, not posttrain's loop; drop {', '.join(loop)}")

    def spec(self) -> dict:
        return {"id": self.environment, "args": self.args, "agent": self.agent_args,
                "paths": self.paths}

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = LibraryTasks(self.python, RUNNER, self.spec(), self.eval_fraction)
        return TaskParts(tasks, agent=LibraryAgent(self.python, RUNNER, self.spec()))
