"""Layer 4: the agent harness — the multi-turn loop with exact token bookkeeping, tools and
their calls (sandbox, context managers and guards build on these)."""

from posttrain.harness.context import (
    discard_tool_turns,
    microcompact,
    retain_reasoning,
    select_recent_user_messages,
    should_compact,
)
from posttrain.harness.loop import STOP_REASONS, AgentLoop, LoopLimits
from posttrain.harness.replay import episode_problems
from posttrain.harness.tool_calls import HERMES_PATTERN, ToolCall, parse_tool_calls
from posttrain.harness.tools import Tool, ToolRegistry, ToolResult
from posttrain.harness.truncation import truncate_output

__all__ = [
    "STOP_REASONS",
    "AgentLoop",
    "LoopLimits",
    "HERMES_PATTERN",
    "Tool",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "discard_tool_turns",
    "episode_problems",
    "microcompact",
    "parse_tool_calls",
    "retain_reasoning",
    "select_recent_user_messages",
    "should_compact",
    "truncate_output",
]
