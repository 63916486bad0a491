# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .arithmetic import ArithmeticEnv, ArithmeticTasks, Problem
from .base import Environment, SplitTasks, StepResult, Task
from .calculator import CalculatorTasks, calculate
from .code import CodeEnv, CodeProblem, CodeTasks
from .effort import EffortTask, prepend_system
from .lookup import LookupProblem, LookupTasks
from .reasoning_gym import GymProblem, ReasoningGymTasks
from .search import SearchIndex, SearchProblem, SearchTasks, make_search_tool

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
    "LookupProblem",
    "LookupTasks",
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
