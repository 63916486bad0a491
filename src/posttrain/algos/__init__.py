"""Layer 1: pure tensor functions, each registered by its canonical ALGORITHMS.md name."""

from posttrain.algos.advantages import ADVANTAGE_ESTIMATORS, grpo
from posttrain.algos.aggregation import LOSS_AGGREGATIONS, StepNorm
from posttrain.algos.kl import KL_ESTIMATORS
from posttrain.algos.policy_losses import POLICY_LOSSES, importance_ratio, ppo_clip
from posttrain.algos.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "Registry",
    "StepNorm",
    "grpo",
    "importance_ratio",
    "ppo_clip",
]
