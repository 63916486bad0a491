"""Start a Ray session and the rollout engine actors a ``DistConfig`` asks for."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from posttrain.cluster.engine_actor import EngineActor
from posttrain.cluster.ray_engine import RayEngine
from posttrain.config import DistConfig
from posttrain.config.extension import FILE_MODULE
from posttrain.config.sections.engine import EngineFamily
from posttrain.engines.torch_member import TorchEngineConfig


def require_ray():
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError("dist.backend=ray needs Ray: pip install 'posttrain[ray]'") from exc
    return ray


@contextlib.contextmanager
def ray_session(cfg: DistConfig, num_cpus: int | None = None) -> Iterator[None]:
    """Connect to ``cfg.address`` (or ``RAY_ADDRESS``, which a RayJob sets) or start a local
    cluster of this process's own (``num_cpus``: its CPU count; never one that ``ray start``
    left on the machine, which Ray's default would join); a session this call started is
    shut down at exit, leaving the process's environment as it found it."""
    ray = require_ray()
    started = not ray.is_initialized()
    environ = dict(os.environ)
    if started:
        address = cfg.address or os.environ.get("RAY_ADDRESS") or "local"
        ray.init(address=address, num_cpus=num_cpus if address == "local" else None,
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()
            restore_environ(environ)


def restore_environ(environ: dict[str, str]) -> None:
    """``os.environ`` as it was: ``ray.init`` sets variables for its session that
    ``shutdown`` leaves (a local cluster's ``RAY_AUTH_MODE=token``; ``PYTHONBREAKPOINT``,
    which would send the user's ``breakpoint()`` to Ray's remote debugger), and processes
    started later would inherit them."""
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update(environ)


def launch_engines(cfg: DistConfig, model_dir: Path, dtype: str, pad_token_id: int,
                   eos_token_id: int | None, engine: EngineFamily | None = None,
                   **fault_injection) -> list[RayEngine]:
    """``cfg.engines`` engine actors loaded from ``model_dir``, placed per ``cfg.placement``
    (inside a ``ray_session``), each the engine the member ``engine`` builds (None: the torch
    engine); colocated ones reserve no CPUs, and ``gpus_per_engine`` of a GPU each (checked
    against the cluster's GPUs first); disaggregated ones take one bundle each of a
    placement group (``engine_placement``). An engine with a ``device`` runs on the actor's
    GPU when it has one, else on its CPU; weights to it go by ``cfg.weight_transport``.
    ``close_engines`` ends them."""
    ray = require_ray()
    actor_cls = ray.remote(max_restarts=cfg.max_restarts, max_task_retries=0)(EngineActor)
    if cfg.placement == "colocated":  # a share of the trainer's GPU, if any
        check_gpus(ray, cfg.gpus_per_engine * cfg.engines)
        options = [{"num_cpus": 0, "num_gpus": cfg.gpus_per_engine}] * cfg.engines
        threads, group = 1, None
    else:
        group, options = engine_placement(cfg)
        threads = max(1, int(cfg.cpus_per_engine))
    device = "cuda" if cfg.gpus_per_engine else "cpu"  # Ray shows the actor its GPUs only
    engine = engine or TorchEngineConfig()
    if type(engine).__module__.startswith(FILE_MODULE):  # a user's file: no actor imports it
        ray.cloudpickle.register_pickle_by_value(sys.modules[type(engine).__module__])
    if "device" in type(engine).model_fields:
        engine = engine.model_copy(update={"device": device})
    actors = [actor_cls.options(**o).remote(engine, str(model_dir), dtype, pad_token_id,
                                            eos_token_id, threads, **fault_injection)
              for o in options]
    # NCCL between processes on different GPUs; engines sharing the trainer's GPU get gloo
    link = device if cfg.placement == "disaggregated" else "cpu"
    collective = link if cfg.weight_transport == "collective" else None
    return [RayEngine(actor, group=group, bucket_bytes=int(cfg.weight_bucket_mb * (1 << 20)),
                      collective=collective, keep_last=cfg.max_restarts > 0)
            for actor in actors]


def check_gpus(ray, wanted: float) -> None:
    """Colocated engines' GPU shares exist in the cluster (Ray would wait for them forever)."""
    have = ray.cluster_resources().get("GPU", 0.0)
    if wanted > have:
        raise RuntimeError(f"dist: colocated engines want {wanted:g} GPUs in all "
                           f"(dist.engines x dist.gpus_per_engine); the cluster has {have:g}: "
                           "lower dist.gpus_per_engine, or run on a machine with GPUs")


def close_engines(engines: list[RayEngine]) -> None:
    """End the engines' actors and give back their placement group's reservation."""
    ray = require_ray()
    from ray.util.placement_group import remove_placement_group

    for engine in engines:
        ray.kill(engine.actor, no_restart=True)
    for group in {id(e.group): e.group for e in engines if e.group is not None}.values():
        remove_placement_group(group)


def engine_placement(cfg: DistConfig) -> tuple[object, list[dict]]:
    """Actor options placing engine ``i`` in bundle ``i`` of a new placement group of
    ``cfg.engines`` bundles (``cpus_per_engine`` CPUs, ``gpus_per_engine`` GPUs), packed or
    spread (``engine_strategy``); reserved all at once, or a ``RuntimeError`` saying what the
    cluster lacks after ``placement_timeout_s``. The group lives as long as the Ray job."""
    ray = require_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle = {"CPU": cfg.cpus_per_engine}
    if cfg.gpus_per_engine:
        bundle["GPU"] = cfg.gpus_per_engine
    group = placement_group([bundle] * cfg.engines, strategy=cfg.engine_strategy.upper())
    try:
        ray.get(group.ready(), timeout=cfg.placement_timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise RuntimeError(
            f"dist: {cfg.engines} engine bundles of {bundle} ({cfg.engine_strategy}) could not "
            f"be placed within dist.placement_timeout_s={cfg.placement_timeout_s:g} s; the "
            f"cluster has {ray.cluster_resources()} in all: lower dist.engines, "
            "dist.cpus_per_engine or dist.gpus_per_engine, or add nodes") from None
    return group, [{"num_cpus": cfg.cpus_per_engine, "num_gpus": cfg.gpus_per_engine,
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(
                        group, placement_group_bundle_index=i)} for i in range(cfg.engines)]
