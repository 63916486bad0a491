# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .agent import AgentRollout
from .async_source import AsyncEpisodes
from .evaluation import evaluate
from .external import ExternalAgentRollout, command_agent
from .scoring import informative, rollout_metrics, shape_rewards
from .single_turn import SyncEpisodes, rollout
from .wrappers.greedy_baseline import GreedyBaseline
from .wrappers.judged import JudgedRollout

__all__ = ["AgentRollout", "AsyncEpisodes", "ExternalAgentRollout", "GreedyBaseline",
           "JudgedRollout", "SyncEpisodes", "command_agent", "evaluate", "informative",
           "rollout", "rollout_metrics", "shape_rewards"]
