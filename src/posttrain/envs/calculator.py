"""The calculator environment: arithmetic too large to do in the head, with a ``calculate``
tool. SFT traces call the tool and copy its result; a share of them guess instead."""

from __future__ import annotations

import ast
import operator
import random
import re
from typing import ClassVar

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskParts
from posttrain.envs.arithmetic import ArithmeticConfig, ArithmeticTasks, Problem
from posttrain.envs.base import answer_turn, tool_turns
from posttrain.harness import ToolRegistry

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
MAX_DIGITS = 40


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_eval(node.left), _eval(node.right))
        if len(str(abs(value))) > MAX_DIGITS:
            raise ValueError("result too large")
        return value
    raise ValueError("only integers, + - * // % and parentheses are allowed")


def calculate(expression: str) -> str:
    """Evaluate an integer arithmetic expression.

    Args:
        expression: Integers with + - * // % and parentheses, e.g. "(12 + 3) * 4".
    """
    unpadded = re.sub(r"\b0+(\d)", r"\1", expression)  # "007" is 7, not a syntax error
    return str(_eval(ast.parse(unpadded, mode="eval").body))


class CalculatorTasks(ArithmeticTasks):
    """Arithmetic problems solved with the ``calculate`` tool (default: 3-digit products)."""

    def __init__(self, ops: tuple[str, ...] = ("*",), digits: int = 3, seed: int = 0,
                 eval_fraction: float = 0.1) -> None:
        super().__init__(ops, digits, seed, eval_fraction)

    def sft_conversation(self, p: Problem, error_rate: float, rng: random.Random) -> list[dict]:
        """Call the tool on the expression and answer with its result; with probability
        ``error_rate`` answer a guess (the flawed solver's) without calling it."""
        if rng.random() < error_rate:
            return [*p.messages(), answer_turn(p.flawed_answer)]
        expression = f"{p.a}{p.op}{p.b}"
        return [*p.messages(), *tool_turns([("calculate", {"expression": expression})],
                                           [calculate(expression)]), answer_turn(p.answer)]


@member("task", "calculator")
class CalculatorConfig(ArithmeticConfig):
    """``calculator``: the arithmetic problems (``ops``, ``digits``) through the agent loop
    with a ``calculate`` tool; SFT on tool-use traces."""

    SINGLE_TURN: ClassVar[bool] = False
    PAIRS: ClassVar[bool] = False

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = CalculatorTasks(tuple(self.ops), self.digits, seed, self.eval_fraction)
        return TaskParts(tasks, ToolRegistry([calculate]))
