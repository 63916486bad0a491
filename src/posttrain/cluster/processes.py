"""Process groups for data-parallel trainers (``posttrain.train.parallel``): NCCL where the trainers
compute on CUDA, gloo on the CPU. ``run_processes`` spawns ``world_size`` local processes the way
``torchrun`` would; ``join_launched_group`` joins the group of a process ``torchrun`` started
(``env://``: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; one node or many)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def launched_world_size() -> int:
    """The size of the group ``torchrun`` started this process in (1 when it did not)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def join_launched_group(backend: str) -> int:
    """Join the process group ``torchrun`` set up (``env://``); returns this rank. With NCCL
    the process takes GPU ``LOCAL_RANK``."""
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, init_method="env://")
    return dist.get_rank()


def _entry(rank: int, world_size: int, port: int, threads: int, out: str,
           fn: Callable[..., Any], args: tuple, backend: str) -> None:
    torch.set_num_threads(threads)
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun sets it: device "auto" reads it
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    try:
        result = fn(*args)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def run_processes(fn: Callable[..., Any], world_size: int, *args: Any,
                  threads: int | None = None, backend: str = "gloo") -> Any:
    """``fn(*args)`` in every rank (spawned processes; ``fn`` must be importable); returns rank
    0's result. ``threads``: torch threads per process (default: the CPUs split evenly);
    ``backend``: ``gloo``, or ``nccl`` (rank ``r`` on GPU ``r``)."""
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.pt")
        mp.spawn(_entry, args=(world_size, free_port(), threads, out, fn, args, backend),
                 nprocs=world_size, join=True)
        return torch.load(out, weights_only=False)
