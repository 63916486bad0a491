"""Layer 6: where the run's pieces execute. ``backend: ray`` puts rollout engines in Ray actors
behind the same ``Engine`` protocol the local run uses; Ray is imported only when asked for
(``pip install 'posttrain[ray]'``)."""

from posttrain.cluster.engine_actor import EngineActor, RayEngine
from posttrain.cluster.launch import launch_engines, ray_session
from posttrain.cluster.trainer_actor import RayTrainer, TrainerActor

__all__ = [
    "EngineActor",
    "RayEngine",
    "RayTrainer",
    "TrainerActor",
    "launch_engines",
    "ray_session",
]
