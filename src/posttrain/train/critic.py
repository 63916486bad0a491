"""PPO's critic: ``value_clip`` optimiser steps of a value model on GAE returns."""

from __future__ import annotations

import math

import torch

from posttrain.algos import StepNorm, get
from posttrain.models import sequence_values
from posttrain.train.trainer import Trainer, mean_metrics
from posttrain.types import Batch


def critic_values(critic: Trainer, batch: Batch) -> torch.Tensor:
    """``[B, T]`` values at rollout time (no gradient), zero outside the loss mask."""
    values = critic.score_tokens(batch, critic.model, lambda mb: sequence_values(
        critic.model, mb.input_ids, mb.attention_mask))
    return values * batch.loss_mask


def critic_step(critic: Trainer, batch: Batch, cliprange_value: float, loss_agg_mode: str,
                max_len: int | None = None) -> dict[str, float]:
    """One optimiser step of ``agg(value_clip(V, V_old, returns))``; metrics ``critic/*``."""
    if batch.old_values is None or batch.returns is None:
        raise ValueError("critic_step needs batch.old_values and batch.returns")
    aggregate = get("aggregation", loss_agg_mode)
    token_mean = get("aggregation", "token_mean")

    def micro(mb: Batch, norm: StepNorm):
        v = sequence_values(critic.model, mb.input_ids, mb.attention_mask)
        loss, stats = get("policy_loss", "value_clip")(
            values=v, old_values=mb.old_values, returns=mb.returns, cliprange_value=cliprange_value)
        mask = mb.loss_mask
        return aggregate(loss=loss, mask=mask, norm=norm), {
            "clip_frac": token_mean(loss=stats["clipped"], mask=mask, norm=norm),
            "value": token_mean(loss=v.detach(), mask=mask, norm=norm)}

    metrics = critic.optimizer_step(batch, micro, max_len)
    return {f"critic/{k}": v for k, v in metrics.items() if k not in ("lr", "bad_steps")}


def update_critic(critic: Trainer, batch: Batch, epochs: int, mini_batches: int,
                  cliprange_value: float, loss_agg_mode: str, max_len: int | None
                  ) -> dict[str, float]:
    """The critic's ``epochs x mini_batches`` optimiser steps on the step's returns; mean
    metrics."""
    size = math.ceil(len(batch) / mini_batches)
    return mean_metrics([critic_step(critic, part, cliprange_value, loss_agg_mode, max_len)
                         for _ in range(epochs) for part in batch.split(size)])
