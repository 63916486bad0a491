"""Layer 7: the pydantic config tree and its YAML loader."""

from posttrain.config.loading import ConfigError, apply_override, build_config, load_config
from posttrain.config.schema import ModelConfig, RewardConfig, RunConfig, TaskConfig

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
