"""Where the run's pieces execute (``dist`` section; docs/scaling.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from posttrain.config.rules import changed
from posttrain.config.section import Section


class DistConfig(Section):
    """``backend: local`` runs everything in this process. ``ray`` runs the rollout engines as
    Ray actors (``engines`` of them; a crashed one is restarted up to ``max_restarts`` times) on
    the cluster at ``address`` (null: ``RAY_ADDRESS`` if set, as in a KubeRay RayJob, else a
    local cluster of the run's own). ``placement``: ``colocated`` actors
    reserve no CPUs and time-share the trainer's (with ``gpus_per_engine``, a share of a GPU
    each: the trainer's, with ``engine.sleep``); ``disaggregated`` actors are placed in
    one Ray placement group, a bundle of ``cpus_per_engine`` CPUs and ``gpus_per_engine`` GPUs
    each (an engine with a GPU runs on it), its bundles packed onto few nodes or spread over
    many (``engine_strategy``); a group the cluster cannot hold within ``placement_timeout_s``
    is an error, not a hang. Weights reach engine actors in buckets of ``weight_bucket_mb``,
    through the object store or (``weight_transport: collective``) broadcast over a gloo
    (NCCL with GPU engines) group of the driver and each engine. ``trainer_actor`` runs the RL
    stage's policy trainer as a Ray actor too (the driver keeps the loop, a copy of the weights
    for checkpoints, and a critic if any).
    ``trainer_processes > 1`` runs the stages in that many processes of a gloo
    ``torch.distributed`` group that split each update's micro-batches (data parallel, DDP's
    semantics, or sharded: ``trainer.shard``); RL rollouts are generated once, by rank 0's
    engines (in-process or Ray actors), and broadcast to the other ranks."""

    backend: Literal["local", "ray"] = Field(
        "local", description="local (this process) or ray (engines as Ray actors)")
    address: str | None = Field(
        None, description="the Ray cluster (null: RAY_ADDRESS, else a local cluster)")
    placement: Literal["colocated", "disaggregated"] = Field(
        "colocated",
        description="colocated (actors share the trainer's resources) or disaggregated")
    engines: int = Field(1, ge=1, description="rollout engine actors")
    cpus_per_engine: float = Field(1.0, gt=0,
                                   description="CPUs an engine's bundle reserves (disaggregated)")
    gpus_per_engine: float = Field(0.0, ge=0,
                                   description="GPUs an engine takes, a share when below 1")
    engine_strategy: Literal["pack", "spread"] = Field(
        "pack", description="pack the engines' bundles onto few nodes or spread them over many")
    placement_timeout_s: float = Field(
        60.0, gt=0, description="seconds to wait for the engines' placement group")
    weight_bucket_mb: float = Field(256.0, gt=0,
                                    description="MiB a bucket of the weights sent to engine actors")
    weight_transport: Literal["object_store", "collective"] = Field(
        "object_store",
        description="object_store, or collective (broadcast over a gloo/NCCL group)")
    max_restarts: int = Field(3, ge=0, description="restarts of a crashed engine actor")
    trainer_processes: int = Field(1, ge=1, description="data-parallel trainer processes (gloo)")
    trainer_actor: bool = Field(False, description="run the RL policy trainer as a Ray actor")

    @model_validator(mode="after")
    def _ray_options_need_ray(self) -> DistConfig:
        ray_only = changed(self, "dist", ["address", "placement", "engines", "cpus_per_engine",
                                          "gpus_per_engine", "engine_strategy",
                                          "placement_timeout_s", "weight_bucket_mb",
                                          "weight_transport", "max_restarts",
                                          "trainer_actor"])
        if self.backend == "local" and ray_only:
            raise ValueError(f"{ray_only[0]} applies to dist.backend=ray")
        if self.trainer_processes > 1 and self.trainer_actor:
            raise ValueError("dist.trainer_actor runs one trainer: set dist.trainer_processes=1")
        reserved = changed(self, "dist", ["cpus_per_engine", "engine_strategy",
                                          "placement_timeout_s"])
        if self.placement == "colocated" and reserved:
            raise ValueError(f"{reserved[0]} places engines in a placement group: it "
                             "applies to placement=disaggregated")
        return self
