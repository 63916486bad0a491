# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .cluster_config import DistConfig
from .distill_config import DistillConfig, OPDConfig, TeacherConfig
from .offline_config import PairDataConfig, PreferenceConfig, RewardModelConfig, SFTConfig
from .rl_config import (
    AlgoConfig,
    AsyncConfig,
    DynamicSamplingConfig,
    EvalConfig,
    RLConfig,
    ShapingRule,
    SyncConfig,
)
from .section import (
    BatchStageConfig,
    OptimConfig,
    SampledStageConfig,
    SamplingConfig,
    Section,
    StageConfig,
)
from .trainer_config import (
    ActorConfig,
    CriticConfig,
    EntropyBonusConfig,
    KLConfig,
    LoraConfig,
    OffPolicyConfig,
    PolicyLossConfig,
    TrainerConfig,
)

__all__ = [
    "ActorConfig",
    "AlgoConfig",
    "AsyncConfig",
    "BatchStageConfig",
    "CriticConfig",
    "DistConfig",
    "DistillConfig",
    "DynamicSamplingConfig",
    "EntropyBonusConfig",
    "EvalConfig",
    "KLConfig",
    "LoraConfig",
    "OPDConfig",
    "OffPolicyConfig",
    "OptimConfig",
    "PairDataConfig",
    "PolicyLossConfig",
    "PreferenceConfig",
    "RLConfig",
    "RewardModelConfig",
    "SFTConfig",
    "SampledStageConfig",
    "SamplingConfig",
    "Section",
    "ShapingRule",
    "StageConfig",
    "SyncConfig",
    "TeacherConfig",
    "TrainerConfig",
]
