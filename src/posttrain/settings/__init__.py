"""Layer 1: the config sections (pydantic), validated where they are declared; no behaviour."""

from posttrain.settings.cluster_config import DistConfig
from posttrain.settings.distill_config import DistillConfig, OPDConfig, TeacherConfig
from posttrain.settings.offline_config import (
    PairDataConfig,
    PreferenceConfig,
    RewardModelConfig,
    SFTConfig,
)
from posttrain.settings.rl_config import (
    AlgoConfig,
    AsyncConfig,
    DynamicSamplingConfig,
    EvalConfig,
    RLConfig,
    ShapingRule,
    SyncConfig,
)
from posttrain.settings.section import (
    BatchStageConfig,
    OptimConfig,
    SampledStageConfig,
    SamplingConfig,
    Section,
    StageConfig,
)
from posttrain.settings.trainer_config import (
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
