# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .loading import ConfigError, apply_override, build_config, load_config
from .schema import ModelConfig, RewardConfig, RunConfig, TaskConfig
from .section import (
    BatchStageConfig,
    OptimConfig,
    SampledStageConfig,
    SamplingConfig,
    Section,
    StageConfig,
)
from .sections.agent import Compaction, LoopLimits
from .sections.dist import DistConfig
from .sections.distill import DistillConfig, OPDConfig, TeacherConfig
from .sections.offline import PairDataConfig, PreferenceConfig, RewardModelConfig, SFTConfig
from .sections.rl import (
    AlgoConfig,
    AsyncConfig,
    DynamicSamplingConfig,
    EvalConfig,
    RLConfig,
    ShapingRule,
    SyncConfig,
)
from .sections.trainer import (
    ActorConfig,
    CriticConfig,
    EntropyBonusConfig,
    KLConfig,
    LoraConfig,
    MTPConfig,
    OffPolicyConfig,
    PolicyLossConfig,
    TrainerConfig,
)

__all__ = [
    "ActorConfig",
    "AlgoConfig",
    "AsyncConfig",
    "BatchStageConfig",
    "Compaction",
    "ConfigError",
    "CriticConfig",
    "DistConfig",
    "DistillConfig",
    "DynamicSamplingConfig",
    "EntropyBonusConfig",
    "EvalConfig",
    "KLConfig",
    "LoopLimits",
    "LoraConfig",
    "MTPConfig",
    "ModelConfig",
    "OPDConfig",
    "OffPolicyConfig",
    "OptimConfig",
    "PairDataConfig",
    "PolicyLossConfig",
    "PreferenceConfig",
    "RLConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RunConfig",
    "SFTConfig",
    "SampledStageConfig",
    "SamplingConfig",
    "Section",
    "ShapingRule",
    "StageConfig",
    "SyncConfig",
    "TaskConfig",
    "TeacherConfig",
    "TrainerConfig",
    "apply_override",
    "build_config",
    "load_config",
]
