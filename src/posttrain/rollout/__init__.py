"""Layer 5: making scored episodes — single-turn, agent and judged rollouts, evaluation,
reward shaping, and the asynchronous machinery (dispatcher, buffer, workers)."""

from posttrain.rollout.agent import AgentRollout
from posttrain.rollout.async_source import AsyncEpisodes
from posttrain.rollout.evaluation import evaluate, rollout_metrics
from posttrain.rollout.judged import JudgedRollout
from posttrain.rollout.reward_shaping import informative, shape_rewards
from posttrain.rollout.single_turn import SyncEpisodes, rollout

__all__ = ["AgentRollout", "AsyncEpisodes", "JudgedRollout", "SyncEpisodes", "evaluate",
           "informative", "rollout", "rollout_metrics", "shape_rewards"]
