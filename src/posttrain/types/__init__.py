"""Layer 0: the token-exact data model shared by every other layer."""

from posttrain.types.batch import Batch
from posttrain.types.episode import Episode, Group, Segment, StepSpan
from posttrain.types.errors import (
    ChatTemplateError,
    DataError,
    MismatchError,
    TeacherMismatchError,
    WeightSyncError,
)
from posttrain.types.jsonl import read_episodes, write_episodes
from posttrain.types.sampling import SamplingParams

__all__ = [
    "Batch",
    "ChatTemplateError",
    "DataError",
    "Episode",
    "Group",
    "MismatchError",
    "SamplingParams",
    "Segment",
    "StepSpan",
    "TeacherMismatchError",
    "WeightSyncError",
    "read_episodes",
    "write_episodes",
]
