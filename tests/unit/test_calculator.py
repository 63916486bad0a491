"""The calculator tool and its task's SFT traces."""

import random

import pytest

from posttrain.envs import CalculatorTasks, calculate
from posttrain.harness import ToolRegistry, parse_tool_calls


def test_calculate_evaluates_integer_arithmetic_only():
    assert calculate("(12 + 3) * 4") == "60"
    assert calculate("007*010") == "70" and calculate("-5 // 2") == "-3"
    for bad in ("__import__('os')", "2 ** 10", "1.5 * 2", "x + 1", "9" * 30 + " * " + "9" * 30):
        with pytest.raises((ValueError, SyntaxError)):
            calculate(bad)


def test_sft_traces_call_the_tool_or_guess():
    tasks = CalculatorTasks(seed=0)
    p = tasks.sample(1, random.Random(0))[0]
    trace = tasks.sft_conversation(p, 0.0, random.Random(1))
    assert [m["role"] for m in trace] == ["user", "assistant", "tool", "assistant"]
    (call,) = parse_tool_calls(trace[1]["content"])
    (result,) = ToolRegistry([calculate]).execute_sync([call])
    assert result.output == trace[2]["content"] == str(p.answer)
    assert trace[3]["content"] == f"<answer>{p.answer}</answer>"
    guess = tasks.sft_conversation(p, 1.0, random.Random(1))
    assert [m["role"] for m in guess] == ["user", "assistant"]
    assert guess[1]["content"] == f"<answer>{p.flawed_answer}</answer>"
