"""Start a Ray session and the rollout engine actors a ``DistConfig`` asks for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from posttrain.cluster.engine_actor import EngineActor, RayEngine
from posttrain.settings import DistConfig


def require_ray():
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError("dist.backend=ray needs Ray: pip install 'posttrain[ray]'") from exc
    return ray


@contextlib.contextmanager
def ray_session(cfg: DistConfig, num_cpus: int | None = None) -> Iterator[None]:
    """Connect to ``cfg.address`` or start a local cluster (``num_cpus``: its CPU count);
    a session this call started is shut down at exit."""
    ray = require_ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=cfg.address, num_cpus=None if cfg.address else num_cpus,
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def launch_engines(cfg: DistConfig, model_dir: Path, dtype: str, pad_token_id: int,
                   eos_token_id: int | None, **fault_injection) -> list[RayEngine]:
    """``cfg.engines`` engine actors loaded from ``model_dir``, placed per ``cfg.placement``
    (inside a ``ray_session``)."""
    ray = require_ray()
    if cfg.placement == "colocated":
        resources, threads = {"num_cpus": 0}, 1
    else:
        resources = {"num_cpus": cfg.cpus_per_engine}
        threads = max(1, int(cfg.cpus_per_engine))
    actor_cls = ray.remote(max_restarts=cfg.max_restarts, max_task_retries=0)(EngineActor)
    actors = [actor_cls.options(**resources).remote(str(model_dir), dtype, pad_token_id,
                                                    eos_token_id, threads, **fault_injection)
              for _ in range(cfg.engines)]
    return [RayEngine(actor) for actor in actors]
