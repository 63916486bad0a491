"""Layer 4: environments and task sources."""

from posttrain.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, Problem
from posttrain.envs.base import Environment, StepResult, Task
from posttrain.envs.calculator import CalculatorTasks, calculate
from posttrain.envs.effort import EffortTask

__all__ = [
    "ArithmeticEnv",
    "ArithmeticTasks",
    "CalculatorTasks",
    "EffortTask",
    "Environment",
    "Problem",
    "StepResult",
    "Task",
    "calculate",
]
