"""Layer 4: the agent harness — the multi-turn loop with exact token bookkeeping, tools and
their calls (sandbox, context managers and guards build on these)."""

from posttrain.harness.compaction import STRATEGIES, Compaction
from posttrain.harness.context import (
    discard_tool_turns,
    microcompact,
    retain_reasoning,
    select_recent_user_messages,
    should_compact,
)
from posttrain.harness.episode_env import EpisodeEnv
from posttrain.harness.episode_state import STOP_REASONS, LoopLimits
from posttrain.harness.guard import Guard, GuardRule
from posttrain.harness.loop import AgentLoop
from posttrain.harness.replay import episode_problems
from posttrain.harness.sandbox import (
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxResult,
    namespaces_available,
)
from posttrain.harness.tool_calls import (
    HERMES_PATTERN,
    ToolCall,
    format_tool_call,
    parse_tool_calls,
)
from posttrain.harness.tools import MALFORMED, Tool, ToolRegistry, ToolResult
from posttrain.harness.tree import run_tree
from posttrain.harness.truncation import truncate_output

__all__ = [
    "MALFORMED",
    "STOP_REASONS",
    "STRATEGIES",
    "AgentLoop",
    "Compaction",
    "EpisodeEnv",
    "Guard",
    "GuardRule",
    "LoopLimits",
    "HERMES_PATTERN",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "Tool",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "discard_tool_turns",
    "episode_problems",
    "format_tool_call",
    "microcompact",
    "namespaces_available",
    "parse_tool_calls",
    "retain_reasoning",
    "run_tree",
    "select_recent_user_messages",
    "should_compact",
    "truncate_output",
]
