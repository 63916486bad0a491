# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .engine_actor import EngineActor
from .launch import close_engines, launch_engines, ray_session
from .ray_engine import RayEngine
from .trainer_actor import RayTrainer, TrainerActor

__all__ = [
    "EngineActor",
    "RayEngine",
    "RayTrainer",
    "TrainerActor",
    "close_engines",
    "launch_engines",
    "ray_session",
]
