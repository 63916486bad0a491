"""Layer 5: the whole update — episodes to batch, old and reference log-probs, advantages,
optimiser steps, KL and entropy control — and the trainer, its losses, schedule and
checkpoints."""

from posttrain.train.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from posttrain.train.critic import critic_step, critic_values
from posttrain.train.losses import RLTokens, rl_loss, sft_loss
from posttrain.train.objective_steps import (
    distill_step,
    preference_step,
    reward_model_step,
    sft_step,
)
from posttrain.train.protocol import PolicyTrainer
from posttrain.train.rl_update import rl_step, rl_steps
from posttrain.train.schedule import build_optimizer, lr_factor
from posttrain.train.trainer import Trainer, TrainingDivergedError

__all__ = [
    "PolicyTrainer",
    "RLTokens",
    "Trainer",
    "TrainingDivergedError",
    "build_optimizer",
    "critic_step",
    "critic_values",
    "distill_step",
    "latest_checkpoint",
    "load_checkpoint_state",
    "lr_factor",
    "preference_step",
    "reward_model_step",
    "rl_loss",
    "rl_step",
    "rl_steps",
    "save_checkpoint",
    "sft_loss",
    "sft_step",
]
