"""Run a function in ``world_size`` processes that form a ``torch.distributed`` group (gloo on
CPU), the way ``torchrun`` would; the trainer inside runs data-parallel
(``posttrain.train.parallel``)."""

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


def _entry(rank: int, world_size: int, port: int, threads: int, out: str,
           fn: Callable[..., Any], args: tuple) -> None:
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    try:
        result = fn(*args)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def run_processes(fn: Callable[..., Any], world_size: int, *args: Any,
                  threads: int | None = None) -> Any:
    """``fn(*args)`` in every rank (spawned processes; ``fn`` must be importable); returns rank
    0's result. ``threads``: torch threads per process (default: the CPUs split evenly)."""
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.pt")
        mp.spawn(_entry, args=(world_size, free_port(), threads, out, fn, args),
                 nprocs=world_size, join=True)
        return torch.load(out, weights_only=False)
