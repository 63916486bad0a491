"""The one way to run a recipe, from the command line or from Python, with the run directory's
safeguards: ``train(cfg)`` claims ``cfg.out_dir`` (its lock, so one live run holds it; its
``config.yaml``; a used directory refused unless ``resume`` or ``overwrite``), then runs every
stage in this process, in ``dist.trainer_processes`` spawned processes, or as this process's
rank of a ``torchrun`` group. Returns the run's summary (also ``summary.json``).

    from posttrain.config import load_config
    from posttrain.recipes import train

    summary = train(load_config("configs/quickstart.yaml", ["rl.steps=20"]))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from posttrain.cluster.processes import (
    backend_for,
    join_launched_group,
    launched_world_size,
    run_processes,
)
from posttrain.config import RunConfig
from posttrain.models.devices import resolve_device
from posttrain.recipes.run_dir import RunDirError, claim_run_dir
from posttrain.recipes.stages import Stages, run_rank


def train(cfg: RunConfig, resume: bool = False, overwrite: bool = False,
          announce=None) -> dict[str, Any]:
    """Run ``cfg`` in its ``out_dir`` (see the module docstring); ``announce(text)`` is told
    when the directory is claimed. ``RunDirError`` when the directory cannot be this run's."""
    out = Path(cfg.out_dir)
    backend = backend_for(resolve_device(cfg.trainer.device, "trainer.device").type)
    launched = launched_world_size() > 1  # a process torchrun started
    if launched and cfg.dist.trainer_processes > 1:
        raise RunDirError("this process was started by torchrun (WORLD_SIZE is set), and "
                          "dist.trainer_processes > 1 would start processes of its own: leave "
                          "it at 1")
    rank = join_launched_group(backend) if launched else 0
    lock = None
    try:
        if rank == 0:
            lock = claim_run_dir(out, cfg.model_dump(mode="json"), resume, overwrite)
            if announce is not None:
                announce(f"posttrain: stages {cfg.stages}, writing to [bold]{cfg.out_dir}[/]")
        if launched:
            torch.distributed.barrier()  # the run directory is ready
            return run_rank(cfg, resume)
        if cfg.dist.trainer_processes > 1:
            return run_processes(run_rank, cfg.dist.trainer_processes, cfg, resume,
                                 threads=cfg.threads, backend=backend)
        return Stages(cfg).run(resume=resume)
    finally:
        if lock is not None:
            lock.close()
        if launched:
            torch.distributed.destroy_process_group()
