"""Layer 5: the trainer, its losses, optimiser schedule and checkpoints."""

from posttrain.train.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from posttrain.train.critic import critic_step, critic_values
from posttrain.train.losses import RLTokens, rl_loss, sft_loss
from posttrain.train.schedule import build_optimizer, lr_factor
from posttrain.train.settings import (
    ActorConfig,
    CriticConfig,
    EntropyBonusConfig,
    KLConfig,
    OffPolicyConfig,
    OptimConfig,
    PolicyLossConfig,
    Section,
    TrainerConfig,
)
from posttrain.train.trainer import Trainer, TrainingDivergedError

__all__ = [
    "ActorConfig",
    "CriticConfig",
    "EntropyBonusConfig",
    "KLConfig",
    "OffPolicyConfig",
    "OptimConfig",
    "PolicyLossConfig",
    "RLTokens",
    "Section",
    "Trainer",
    "TrainerConfig",
    "TrainingDivergedError",
    "build_optimizer",
    "critic_step",
    "critic_values",
    "latest_checkpoint",
    "load_checkpoint_state",
    "lr_factor",
    "rl_loss",
    "save_checkpoint",
    "sft_loss",
]
