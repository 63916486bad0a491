"""The task family ``dataset``: prompts from your dataset (docs/datasets.md), read whole or
streamed."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from posttrain.config.extension import is_path, load_extension
from posttrain.config.family import member
from posttrain.config.rules import unread
from posttrain.config.sections.data import DatasetConfig
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.data.prompt_stream import StreamedDatasetTasks
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.rewards.user_reward import PER_SAMPLE, unknown_columns


@member("task", "dataset")
class DatasetTaskConfig(TaskFamily):
    """``dataset``: prompts from your dataset (``data``: path and columns, ``DatasetConfig``;
    docs/datasets.md), single-turn unless a row brings its own tools."""

    SINGLE_TURN: ClassVar[bool] = True
    GENERATED: ClassVar[bool] = False
    ROW_TOOLS: ClassVar[bool] = True
    data: DatasetConfig = Field(
        description="your prompts: the dataset's path, splits and columns (docs/datasets.md)")

    def check(self, cfg) -> None:
        super().check(cfg)
        if (self.data.eval_path, self.data.eval_split) != (None, None):
            unread(self, "task", ["eval_fraction"],
                   "task.data.eval_path or eval_split names the held-out rows")
        self.check_columns(cfg)

    def check_columns(self, cfg) -> None:
        """What reads the dataset's columns by name reads columns it has, where its head tells
        them: a reward function's parameters, ``eval.group_by``."""
        columns = self.data.known_columns()
        if columns is None:
            return
        for name, part in cfg.reward.parts.items():
            if is_path(part.verifier):
                unknown = unknown_columns(load_extension("reward", part.verifier), columns)
                if unknown:
                    raise ValueError(
                        f"reward.parts.{name}: {part.verifier} takes {', '.join(unknown)}, "
                        f"neither a sample field ({', '.join(sorted(PER_SAMPLE))}) nor a "
                        f"column of {self.data.path!r} ({', '.join(columns)})")
        absent = [c for c in cfg.eval.group_by if c not in columns]
        if absent:
            raise ValueError(f"eval.group_by names {', '.join(absent)}, not a column of "
                             f"{self.data.path!r} ({', '.join(columns)})")

    def build(self, seed: int, models: Models) -> TaskParts:
        kind = StreamedDatasetTasks if self.data.streaming else DatasetTasks
        return TaskParts(kind(self.data, seed, self.eval_fraction))
