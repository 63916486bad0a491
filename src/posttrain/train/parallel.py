"""Data parallelism over ``torch.distributed``'s default process group (gloo on CPU, NCCL on
GPU). Every rank sees the whole batch; rank ``r`` computes micro-batches ``r, r + W, ...`` and
the gradients and statistics are summed over ranks before the optimiser step. The step's
normaliser (``StepNorm``) is computed from the whole batch on every rank, so the summed
gradient is the single-process gradient, whatever ``W`` (tests/integration/test_data_parallel.py).

Two layouts: ``replicate`` (DDP's: every rank holds the whole model and optimiser; gradients are
all-reduced) and ``shard`` (FSDP2: each decoder layer and the rest of the model are sharded over
the ranks, parameters gathered around their forward, gradients reduce-scattered as sums,
optimiser state sharded). With ``shard`` every rank runs the same number of micro-steps (a rank
short of micro-batches runs one at zero weight), because each forward and backward is a
collective. Log-probs are computed inside one ``Scorer`` forward, so FSDP2 gathers the embedding,
the final norm and the tied output head around the whole computation.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from posttrain.models.devices import full
from posttrain.models.logprobs import Scorer

T = TypeVar("T")


class DataParallel:
    def __init__(self, rank: int, world_size: int, sharded: bool = False,
                 offload: bool = False) -> None:
        self.rank, self.world_size, self.sharded = rank, world_size, sharded
        self.offload = offload

    @classmethod
    def current(cls, sharded: bool = False, offload: bool = False) -> DataParallel | None:
        """The default process group's layout, or None outside one (or in a group of one)."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return None
        return cls(dist.get_rank(), dist.get_world_size(), sharded, offload)

    def wrap(self, model: torch.nn.Module) -> Scorer:
        """The model's ``Scorer``; with ``sharded``, FSDP2 over its decoder layers and the
        rest, gradients reduced as sums; with ``offload``, the shards of the parameters,
        gradients and optimiser state live in CPU memory (FSDP2's ``CPUOffloadPolicy``: each
        layer's shard is copied to the device for its forward and backward, and the
        optimiser step runs on the CPU)."""
        scorer = Scorer(model)
        if self.sharded:
            from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy
            from torch.distributed.fsdp import fully_shard as shard

            policy = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if self.offload \
                else OffloadPolicy()
            for layer in model.get_decoder().layers:
                shard(layer, offload_policy=policy)
            shard(scorer, offload_policy=policy)
            for module in scorer.modules():
                if isinstance(module, FSDPModule):  # plain sums (gloo has no PREMUL_SUM)
                    module.set_gradient_divide_factor(1.0)
                    module.set_force_sum_reduction_for_comms(True)
        return scorer

    def shard(self, parts: Sequence[T]) -> list[tuple[T, bool]]:
        """This rank's micro-batches as ``(part, live)``; with ``sharded``, padded with
        ``(parts[0], False)`` to the same count on every rank."""
        mine = [(p, True) for p in parts[self.rank :: self.world_size]]
        if self.sharded:
            mine += [(parts[0], False)] * (math.ceil(len(parts) / self.world_size) - len(mine))
        return mine

    def same_start(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Every rank takes rank 0's values of ``params`` (``replicate``: fresh LoRA adapters
        are drawn from each process's own random state)."""
        for p in params:
            dist.broadcast(p.data, 0)

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """All-reduce (sum) every gradient in one flat buffer; missing ones count as zero
        (``replicate``; FSDP2 has reduce-scattered them already)."""
        if self.sharded:
            return
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


def by_writer(write: bool, action: Callable[[], object]) -> None:
    """``action`` in the writing process only; in a process group, every process waits for
    it (a barrier), so none reads what it writes before it is there."""
    if write:
        action()
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def gathered_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain CPU copy of the FSDP2-sharded ``model`` (a Hugging Face model): built empty on
    the meta device, then filled with each whole parameter gathered in turn and the buffers
    (which FSDP2 does not shard) copied; ties are restored. Every rank must call it."""
    dtype = next(model.parameters()).dtype
    with torch.device("meta"):
        host = type(model)(copy.deepcopy(model.config))
    host = host.to_empty(device="cpu").to(dtype)
    host.load_state_dict({k: full(v.detach()).cpu() for k, v in model.state_dict().items()},
                         strict=True)
    for name, buffer in model.named_buffers():
        host.get_buffer(name).copy_(full(buffer))
    if hasattr(host, "tie_weights"):
        host.tie_weights()
    return host


def full_optimizer_state(scorer: Scorer, optimizer: torch.optim.Optimizer, sharded: bool) -> dict:
    """The whole optimiser state (gathered from the FSDP2 shards when ``sharded``: every rank
    must call it)."""
    if not sharded:
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(scorer, optimizer,
                                    options=StateDictOptions(full_state_dict=True))


def load_full_optimizer_state(scorer: Scorer, optimizer: torch.optim.Optimizer, state: dict,
                              sharded: bool) -> None:
    """Load a whole optimiser state (``full_optimizer_state``'s), sharding it when ``sharded``."""
    if not sharded:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(scorer, optimizer, state,
                             options=StateDictOptions(full_state_dict=True))
