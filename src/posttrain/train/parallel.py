"""Data parallelism over ``torch.distributed``'s default process group (gloo on CPU, NCCL on
GPU), with DDP's semantics: every rank holds the whole model and sees the whole batch; rank
``r`` computes micro-batches ``r, r + W, ...``, and the gradients and statistics are summed over
ranks before the optimiser step. The step's normaliser (``StepNorm``) is computed from the
whole batch on every rank, so the summed gradient is the single-process gradient, whatever
``W`` (tests/integration/test_data_parallel.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

T = TypeVar("T")


class DataParallel:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    @classmethod
    def current(cls) -> DataParallel | None:
        """The default process group's layout, or None outside one (or in a group of one)."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return None
        return cls(dist.get_rank(), dist.get_world_size())

    def shard(self, parts: Sequence[T]) -> list[T]:
        return list(parts[self.rank :: self.world_size])

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """All-reduce (sum) every gradient in one flat buffer; missing ones count as zero."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
            p.grad = g

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Per-key sums over ranks (a rank without micro-batches contributes nothing)."""
        gathered: list[dict[str, float] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, stats)
        out: dict[str, float] = {}
        for part in gathered:
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + v
        return out
