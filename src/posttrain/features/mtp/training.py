"""``trainer.mtp``: an MTP head trained beside the model by ``mtp_self_distill``
(``models.mtp``), one step after each of the model's optimiser steps, on the same batch: the
policy trainer's add-on (hook ``trainer_addon``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch

from posttrain.config import MTPConfig
from posttrain.models.mtp import MTPHead, has_mtp_head, mtp_loss
from posttrain.types import Batch


def head_training(parts, model: torch.nn.Module) -> HeadTraining | None:
    """``trainer.mtp``'s head, shared by the run's stages (``parts``, its ``RunParts``): the
    starting model's (saved beside it), else a fresh one sized to ``model``; None without
    ``trainer.mtp``."""
    cfg = parts.cfg.trainer.mtp
    if cfg is None:
        return None
    start = parts.base_model_dir()
    return HeadTraining(MTPHead.load(start) if has_mtp_head(start) else MTPHead.for_model(model),
                        cfg)


class HeadTraining:
    """``head`` and, from ``attach`` on, its own AdamW; ``step`` after the model's."""

    name = "mtp"  # its state's key in the trainer's

    def __init__(self, head: MTPHead, cfg: MTPConfig) -> None:
        self.head, self.cfg = head, cfg
        self.optimizer: torch.optim.Optimizer | None = None

    def attach(self, device: torch.device) -> None:
        """A trainer's: the head in float32 on ``device``, with a fresh AdamW."""
        self.head.to(device=device, dtype=torch.float32)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=self.cfg.lr,
                                           weight_decay=self.cfg.weight_decay)

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

    def save(self, directory: Path) -> None:
        """The head beside the model saved in ``directory``: an engine drafts with it."""
        self.head.save(directory)


def _counted(loss_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The positions ``mtp_loss`` counts: token ``t + 2`` in the loss mask and attended."""
    return loss_mask[:, 2:].bool() & attention_mask[:, 2:].bool()
