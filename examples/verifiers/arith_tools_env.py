"""The same additions with a tool, for a multi-turn episode: the environment offers ``add``
(an MCP tool server of verifiers' ``Toolset``, started as ``python -m arith_tools_env``),
and the reward functions are ``arith_env``'s. Taskset id ``arith_tools_env``."""

from __future__ import annotations

import verifiers.v1 as vf
from arith_env import Addition, AdditionConfig, Problem, problems


class Calculator(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the model sees the tool as "add"

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b


class ToolAdditionConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ToolAddition(Addition, vf.Task[Problem, vf.State, ToolAdditionConfig]):
    @classmethod
    def toolsets(cls, config: ToolAdditionConfig) -> list[vf.Toolset]:
        return [Calculator(config.tools)]


class ToolAdditionTasksetConfig(AdditionConfig):
    task: ToolAdditionConfig = ToolAdditionConfig()


class ToolAdditionTaskset(vf.Taskset[ToolAddition, ToolAdditionTasksetConfig]):
    def load(self):
        for problem in problems(self.config.split)[:self.config.size]:
            yield ToolAddition(problem, self.config.task)


__all__ = ["ToolAdditionTaskset"]

if __name__ == "__main__":  # verifiers starts the tool server this way
    Calculator.run()
