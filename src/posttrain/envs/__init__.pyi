# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .arithmetic import ArithmeticEnv, ArithmeticTasks, Problem
from .base import Environment, SplitTasks, StepResult, Task, prepend_system
from .calculator import CalculatorTasks, calculate
from .code import CodeEnv, CodeProblem, CodeTasks
from .lookup import LookupProblem, LookupTasks
from .reasoning_gym import GymProblem, ReasoningGymTasks
from .search import SearchIndex, SearchProblem, SearchTasks, make_search_tool
from .typed_user import TypedUser, TypedUserEpisode, TypedUserTasks

__all__ = [
    "ArithmeticEnv",
    "ArithmeticTasks",
    "CalculatorTasks",
    "CodeEnv",
    "CodeProblem",
    "CodeTasks",
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
    "TypedUser",
    "TypedUserEpisode",
    "TypedUserTasks",
    "calculate",
    "make_search_tool",
    "prepend_system",
]
