"""Tools: typed Python functions offered to the model, and their execution.

A tool's JSON schema comes from its signature and Google-style docstring
(``transformers.utils.get_json_schema``, the format chat templates take); its arguments are
validated by pydantic before the body runs. Every failure — malformed call, unknown tool, bad
arguments, an exception, a timeout — becomes an error observation the model reads, and a
counter; nothing raises into the rollout.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import multiprocessing
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from posttrain.harness.limits import MAX_BYTES, MAX_LINES, truncate_output
from posttrain.harness.tool_calls import ToolCall

# How a call ended. The first three are the model's fault (``behaviour_reg``'s error tokens).
MALFORMED = ("format", "unknown_tool", "arguments")
OUTCOMES = ("ok", "blocked", *MALFORMED, "failed", "timeout")


@dataclass
class ToolResult:
    """The observation for one call: ``output`` is what the model sees (truncated),
    ``full_output`` what the episode records; ``outcome`` one of ``OUTCOMES``."""

    call_id: str
    name: str | None
    output: str
    full_output: str
    outcome: str
    seconds: float

    @property
    def error(self) -> bool:
        """The call failed (a guard's block is not an error: the tool answered)."""
        return self.outcome not in ("ok", "blocked")

    @property
    def malformed(self) -> bool:
        return self.outcome in MALFORMED


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _child(fn: Callable, arguments: dict, conn) -> None:  # runs in the forked process
    try:
        conn.send(("ok", _as_text(fn(**arguments))))
    except Exception as e:  # reported to the parent as the tool's error
        conn.send(("error", f"{type(e).__name__}: {e}"))


class ToolTimeout(Exception):
    pass


class Tool:
    """``fn`` (sync or async) as a tool. ``timeout`` seconds per call; ``isolated`` runs a sync
    tool in a forked process that is killed at the timeout (a thread cannot be killed: a
    non-isolated sync tool that hangs returns a timeout error while its thread runs on)."""

    def __init__(self, fn: Callable, timeout: float = 10.0, isolated: bool = False,
                 schema: dict | None = None) -> None:
        """``schema`` (OpenAI's function form): shown instead of ``fn``'s own, and ``fn``
        takes the arguments as keywords unchecked (the implementation checks them)."""
        if isolated and inspect.iscoroutinefunction(fn):
            raise ValueError(f"tool {fn.__name__}: an async tool cannot run isolated")
        self.fn, self.timeout, self.isolated = fn, timeout, isolated
        if schema is not None:
            self.name, self.schema, self._validated = schema["function"]["name"], schema, fn
            return
        self.name = fn.__name__
        from transformers.utils import get_json_schema  # transformers only when a tool is made

        self.schema = get_json_schema(fn)
        self._validated = pydantic.validate_call(fn)

    async def __call__(self, arguments: dict[str, Any]) -> str:
        if inspect.iscoroutinefunction(self.fn):
            return _as_text(await asyncio.wait_for(self._validated(**arguments), self.timeout))
        if not self.isolated:
            return _as_text(await asyncio.wait_for(
                asyncio.to_thread(self._validated, **arguments), self.timeout))
        return await asyncio.to_thread(self._run_isolated, arguments)

    def _run_isolated(self, arguments: dict[str, Any]) -> str:
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(self._validated, arguments, child), daemon=True)
        proc.start()
        try:
            if not parent.poll(self.timeout):
                raise ToolTimeout
            status, text = parent.recv()
        finally:
            proc.kill()
            proc.join()
        if status == "error":
            raise RuntimeError(text)
        return text


class ToolRegistry:
    """Named tools plus their execution; tool output is truncated for the model."""

    def __init__(self, tools: Iterable[Tool] = (), max_output_lines: int = MAX_LINES,
                 max_output_bytes: int = MAX_BYTES) -> None:
        self.tools: dict[str, Tool] = {}
        self.max_output_lines, self.max_output_bytes = max_output_lines, max_output_bytes
        for t in tools:
            self.add(t)

    def add(self, tool: Tool | Callable) -> Tool:
        tool = tool if isinstance(tool, Tool) else Tool(tool)
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self.tools[tool.name] = tool
        return tool

    def schemas(self) -> list[dict]:
        """The tools in the chat template's ``tools=`` format."""
        return [t.schema for t in self.tools.values()]

    def offered(self, schemas: Sequence[dict]) -> ToolRegistry:
        """The tools ``schemas`` name (``{"type": "function", "function": {"name": ...}}``),
        shown to the model with those schemas and run by this registry's implementations.
        ``KeyError`` carries a name this registry has no tool for; ``ValueError`` says a schema
        has no name or names a tool twice."""
        out = ToolRegistry(max_output_lines=self.max_output_lines,
                           max_output_bytes=self.max_output_bytes)
        for schema in schemas:
            fn = schema.get("function") if isinstance(schema, dict) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(name, str):
                raise ValueError(f"a tool schema needs function.name, got {schema!r}")
            if name not in self.tools:
                raise KeyError(name)
            tool = copy.copy(self.tools[name])
            tool.schema = schema
            out.add(tool)
        return out

    async def execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run the calls concurrently; results in call order."""
        return list(await asyncio.gather(*(self._one(c) for c in calls)))

    def execute_sync(self, calls: list[ToolCall]) -> list[ToolResult]:
        return asyncio.run(self.execute(calls))

    async def _one(self, call: ToolCall) -> ToolResult:
        start = time.perf_counter()
        tool = self.tools.get(call.name) if call.name else None
        if call.error is not None:
            outcome, text = "format", call.error
        elif tool is None:
            outcome = "unknown_tool"
            text = f"unknown tool {call.name!r}; available: {', '.join(self.tools) or 'none'}"
        else:
            try:
                outcome, text = "ok", await tool(call.arguments)
            except pydantic.ValidationError as e:
                outcome = "arguments"
                text = f"bad arguments for {call.name}: {e.error_count()} error(s): " + "; ".join(
                    f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in e.errors())
            except (TimeoutError, ToolTimeout):
                outcome, text = "timeout", f"tool {call.name} timed out after {tool.timeout:g} s"
            except Exception as e:  # the tool's own failure is an observation, not a crash
                outcome, text = "failed", f"tool {call.name} failed: {type(e).__name__}: {e}"
        shown = truncate_output(text, self.max_output_lines, self.max_output_bytes)
        return ToolResult(call.call_id, call.name, shown, text, outcome,
                          time.perf_counter() - start)
