"""What the task families of environment libraries that play their own episodes share
(verifiers, NeMo-Gym): the library lists the tasks and plays each episode through
``posttrain serve`` in a Python of its own, by a runner script (``bridge``), and its scores
are the reward parts."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.libraries.bridge import LibraryAgent, LibraryTasks


class LibraryFamily(TaskFamily):
    """A library's environment, run by ``python`` (default: this interpreter) through the
    runner ``RUNNER`` with ``spec()``. Its reward parts have verifier ``env`` (the names the
    library scores by); RL with ``rl.mode: sync``; posttrain's own agent loop is not used."""

    GENERATED: ClassVar[bool] = False
    PARTS_FROM_ENV: ClassVar[bool] = True
    RUNNER: ClassVar[str]
    python: str | None = Field(
        None, description="the Python interpreter that runs the library (null: this one)")

    def check(self, cfg) -> None:
        super().check(cfg)
        other = sorted(n for n, p in cfg.reward.parts.items() if p.verifier != "env")
        if other:
            raise ValueError(f"task.name={self.name}: the environment scores the episodes; "
                             f"reward.parts {', '.join(other)} need verifier env (and the "
                             "names it scores by)")
        if "rl" in cfg.stages and cfg.rl.mode != "sync":
            raise ValueError(f"task.name={self.name} plays with rl.mode=sync")
        agent = cfg.agent
        loop = [what for what, on in (
            ("agent.tools", bool(agent.tools)), ("agent.tree", agent.tree is not None),
            ("agent.swarm", agent.swarm is not None), ("agent.guard", agent.guard is not None),
            ("agent.harnesses", bool(agent.harnesses)), ("an external agent", agent.any_external),
            ("agent.compaction", agent.compaction.strategy != "none")) if on]
        if loop:
            raise ValueError(f"task.name={self.name}: the environment's own agent plays the "
                             f"episodes, not posttrain's loop; drop {', '.join(loop)}")

    def spec(self) -> dict:
        """What the runner is given (JSON)."""
        raise NotImplementedError

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = LibraryTasks(self.python, self.RUNNER, self.spec(), self.eval_fraction)
        return TaskParts(tasks, agent=LibraryAgent(self.python, self.RUNNER, self.spec()))
