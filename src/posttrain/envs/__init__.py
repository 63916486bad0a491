"""Layer 5: environments and task sources."""

from posttrain.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, Problem
from posttrain.envs.base import Environment, SplitTasks, StepResult, Task
from posttrain.envs.calculator import CalculatorTasks, calculate
from posttrain.envs.code import CodeEnv, CodeProblem, CodeTasks
from posttrain.envs.effort import EffortTask, prepend_system
from posttrain.envs.reasoning_gym import GymProblem, ReasoningGymTasks
from posttrain.envs.search import SearchIndex, SearchProblem, SearchTasks, make_search_tool

__all__ = [
    "ArithmeticEnv",
    "ArithmeticTasks",
    "CalculatorTasks",
    "CodeEnv",
    "CodeProblem",
    "CodeTasks",
    "EffortTask",
    "Environment",
    "GymProblem",
    "Problem",
    "ReasoningGymTasks",
    "SearchIndex",
    "SearchProblem",
    "SearchTasks",
    "SplitTasks",
    "StepResult",
    "Task",
    "calculate",
    "make_search_tool",
    "prepend_system",
]
