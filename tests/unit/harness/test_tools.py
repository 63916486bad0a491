"""Tool schemas from signatures, validation, and every failure as an observation."""

import asyncio
import multiprocessing
import os
import time

import pytest

from posttrain.harness import Tool, ToolCall, ToolRegistry


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


async def slow_echo(text: str) -> str:
    """Echo after a pause.

    Args:
        text: What to echo.
    """
    await asyncio.sleep(0.05)
    return text


def explode(x: int) -> int:
    """Always fails.

    Args:
        x: Ignored.
    """
    raise ValueError("boom")


def hang(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "woke"


def call(name, **arguments):
    return ToolCall(name, arguments, call_id=f"c-{name}")


@pytest.fixture
def registry():
    return ToolRegistry([add, slow_echo, explode, Tool(hang, timeout=0.3, isolated=True)],
                        max_output_lines=3)


def test_schema_comes_from_signature_and_docstring(registry):
    schema = registry.tools["add"].schema
    assert schema["function"]["name"] == "add"
    assert schema["function"]["parameters"]["required"] == ["a"]
    params = schema["function"]["parameters"]
    assert params["properties"]["b"]["description"] == "The second number."
    assert [s["function"]["name"] for s in registry.schemas()] == ["add", "slow_echo", "explode",
                                                                   "hang"]


def test_sync_and_async_tools_run_concurrently_in_call_order(registry):
    results = registry.execute_sync([call("slow_echo", text="hi"), call("add", a="3"),
                                     call("slow_echo", text="yo")])
    assert [(r.call_id, r.output, r.error) for r in results] == [
        ("c-slow_echo", "hi", False), ("c-add", "5", False), ("c-slow_echo", "yo", False)]


@pytest.mark.parametrize("bad,fragment,outcome", [
    (ToolCall(None, {}, "c0", error="malformed tool call JSON: x"), "malformed", "format"),
    (ToolCall("nope", {}, "c1"), "unknown tool 'nope'; available: add, slow_echo",
     "unknown_tool"),
    (ToolCall("add", {"a": "seven"}, "c2"), "bad arguments for add", "arguments"),
    (ToolCall("add", {"c": 1}, "c3"), "bad arguments for add", "arguments"),
    (ToolCall("explode", {"x": 1}, "c4"), "tool explode failed: ValueError: boom", "failed"),
])
def test_failures_are_error_observations(registry, bad, fragment, outcome):
    (result,) = registry.execute_sync([bad])
    assert result.error and fragment in result.output and result.outcome == outcome
    assert result.malformed == (outcome != "failed")  # the model's fault, not the tool's


def hang_and_report(seconds: float, record: str) -> str:
    """Write this process's id to ``record``, sleep, then append "woke".

    Args:
        seconds: How long.
        record: A file to write to.
    """
    with open(record, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    with open(record, "a") as f:
        f.write(" woke")
    return "woke"


def test_hanging_isolated_tool_is_killed_at_its_timeout(registry, tmp_path):
    """The call returns at the tool's timeout with the tool's process killed, its sleep never
    over (30 s: only a hang guard, were the process left to run)."""
    # 1 s: time enough for the forked process to write its id first, even on a loaded machine
    reg = ToolRegistry([Tool(hang_and_report, timeout=1.0, isolated=True)])
    record, children = tmp_path / "record", set(multiprocessing.active_children())
    (result,) = reg.execute_sync([call("hang_and_report", seconds=30, record=str(record))])
    assert result.error and "timed out after 1 s" in result.output
    assert result.outcome == "timeout" and not result.malformed
    pid = int(record.read_text().split()[0])  # the tool ran, in a process of its own
    assert pid != os.getpid()
    with pytest.raises(ProcessLookupError):  # killed and reaped when the call returned
        os.kill(pid, 0)
    assert not set(multiprocessing.active_children()) - children
    assert "woke" not in record.read_text()  # killed, not waited for
    (ok,) = registry.execute_sync([call("hang", seconds=0.01)])
    assert ok.output == "woke" and not ok.error


def test_non_isolated_timeout_returns_an_error_observation():
    reg = ToolRegistry([Tool(hang, timeout=0.1)])
    (result,) = reg.execute_sync([call("hang", seconds=0.5)])
    assert result.error and "timed out" in result.output


def test_output_is_truncated_for_the_model_but_recorded_in_full():
    def many(n: int) -> str:
        """Lines.

        Args:
            n: How many.
        """
        return "\n".join(str(i) for i in range(n))

    (result,) = ToolRegistry([many], max_output_lines=4).execute_sync([call("many", n=10)])
    assert "[... omitted 6 of 10 lines ...]" in result.output
    assert result.full_output.count("\n") == 9 and not result.error


def test_duplicate_and_bad_tools_are_refused():
    reg = ToolRegistry([add])
    with pytest.raises(ValueError, match="already registered"):
        reg.add(add)
    with pytest.raises(ValueError, match="cannot run isolated"):
        Tool(slow_echo, isolated=True)
