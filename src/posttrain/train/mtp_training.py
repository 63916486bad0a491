"""``trainer.mtp``: an MTP head trained beside the model by ``mtp_self_distill``
(``models.mtp``), one step after each of the model's optimiser steps, on the same batch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from posttrain.config import MTPConfig
from posttrain.models.mtp import MTPHead, mtp_loss
from posttrain.types import Batch


class MTPTraining:
    """``head`` (kept in float32 on ``device``) and its own AdamW; ``step`` after the model's."""

    def __init__(self, head: MTPHead, cfg: MTPConfig, device: torch.device) -> None:
        self.head = head.to(device=device, dtype=torch.float32)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=cfg.lr,
                                           weight_decay=cfg.weight_decay)

    def step(self, model: torch.nn.Module, batch: Batch, micro_size: int,
             autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
             ) -> dict[str, float]:
        """One step of the head on ``batch`` (right-padded rows, ``micro_size`` at a time,
        each forward under ``autocast``, the trainer's precision): the loss is the token mean
        over the whole batch, and the gradient norm is clipped to 1. A batch with no counted
        position (rows under 3 tokens) leaves the head as is. Returns ``mtp_loss``."""
        device = self.head.proj.weight.device
        self.head.train()
        self.optimizer.zero_grad(set_to_none=True)
        counted = _counted(batch.loss_mask, batch.attention_mask)
        total_count = int(counted.sum())
        if batch.input_ids.shape[1] < 3 or total_count == 0:
            return {}
        total = 0.0
        for mb in batch.split(micro_size):
            share = int(_counted(mb.loss_mask, mb.attention_mask).sum()) / total_count
            if share == 0:
                continue
            mb = mb.to(device)
            with autocast():
                loss = mtp_loss(model, self.head, mb.input_ids, mb.attention_mask, mb.loss_mask)
            (loss * share).backward()
            total += float(loss.detach()) * share
        torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        self.optimizer.step()
        return {"mtp_loss": total}

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])


def _counted(loss_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The positions ``mtp_loss`` counts: token ``t + 2`` in the loss mask and attended."""
    return loss_mask[:, 2:].bool() & attention_mask[:, 2:].bool()
