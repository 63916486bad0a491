# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .batch import Batch
from .episode import Episode, Segment, StepSpan
from .errors import (
    ChatTemplateError,
    DataError,
    MismatchError,
    TeacherMismatchError,
    WeightSyncError,
)
from .jsonl import read_episodes, write_atomic, write_episodes
from .sampling import SamplingParams

__all__ = [
    "Batch",
    "ChatTemplateError",
    "DataError",
    "Episode",
    "MismatchError",
    "SamplingParams",
    "Segment",
    "StepSpan",
    "TeacherMismatchError",
    "WeightSyncError",
    "read_episodes",
    "write_atomic",
    "write_episodes",
]
