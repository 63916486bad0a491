# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from .critic import critic_step, critic_values
from .losses import sft_loss
from .objective_steps import distill_step, preference_step, reward_model_step, sft_step
from .protocol import PolicyTrainer
from .rl_update import PolicySteps, RLTokens, policy_steps, rl_loss
from .shards import CheckpointMismatchError, is_sharded, whole_model
from .trainer import Trainer, TrainingDivergedError, build_optimizer, lr_factor

__all__ = [
    "CheckpointMismatchError",
    "PolicySteps",
    "PolicyTrainer",
    "RLTokens",
    "Trainer",
    "TrainingDivergedError",
    "build_optimizer",
    "critic_step",
    "critic_values",
    "distill_step",
    "is_sharded",
    "latest_checkpoint",
    "load_checkpoint_state",
    "lr_factor",
    "policy_steps",
    "preference_step",
    "reward_model_step",
    "rl_loss",
    "save_checkpoint",
    "sft_loss",
    "sft_step",
    "whole_model",
]
