"""Layer 4: environments and task sources."""

from posttrain.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, Problem
from posttrain.envs.base import Environment, StepResult, Task

__all__ = ["ArithmeticEnv", "ArithmeticTasks", "Environment", "Problem", "StepResult", "Task"]
