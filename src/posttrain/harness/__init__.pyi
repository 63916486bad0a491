# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .context import discard_tool_turns, microcompact, retain_reasoning, select_recent_user_messages
from .episode_env import EpisodeEnv
from .episode_state import STOP_REASONS
from .guard import Guard, GuardRule
from .limits import truncate_output
from .loop import AgentLoop, EpisodeItem
from .replay import episode_problems
from .swarm import Swarm, SwarmSettings
from .tool_calls import (
    HERMES_PATTERN,
    ToolCall,
    format_tool_call,
    parse_tool_calls,
    strip_tool_calls,
)
from .tools import MALFORMED, Tool, ToolRegistry, ToolResult
from .tree import run_tree

__all__ = ["MALFORMED", "STOP_REASONS", "AgentLoop", "EpisodeEnv", "EpisodeItem", "Guard",
           "GuardRule", "HERMES_PATTERN", "Swarm", "SwarmSettings", "Tool", "ToolCall",
           "ToolRegistry", "ToolResult", "discard_tool_turns", "episode_problems",
           "format_tool_call", "microcompact", "parse_tool_calls", "strip_tool_calls",
           "retain_reasoning", "run_tree", "select_recent_user_messages", "truncate_output"]
