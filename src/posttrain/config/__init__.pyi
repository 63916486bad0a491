# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .loading import ConfigError, apply_override, build_config, load_config
from .schema import ModelConfig, RewardConfig, RunConfig, TaskConfig

__all__ = [
    "ConfigError",
    "ModelConfig",
    "RewardConfig",
    "RunConfig",
    "TaskConfig",
    "apply_override",
    "build_config",
    "load_config",
]
