"""Layer 4: the agent harness — tools and their calls (the loop, sandbox, context managers and
guards build on these)."""

from posttrain.harness.tool_calls import HERMES_PATTERN, ToolCall, parse_tool_calls
from posttrain.harness.tools import Tool, ToolRegistry, ToolResult
from posttrain.harness.truncation import truncate_output

__all__ = [
    "HERMES_PATTERN",
    "Tool",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "parse_tool_calls",
    "truncate_output",
]
