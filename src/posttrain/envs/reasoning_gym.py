"""Adapter for reasoning-gym's procedural generators: single-turn tasks scored by the dataset's
own ``score_answer`` (verifier ``reasoning_gym``). Optional: ``pip install 'posttrain[rgym]'``."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn
from posttrain.rewards.reasoning_gym import gym_dataset, gym_reference

INSTRUCTION = "Give the final answer in <answer></answer> tags."


@dataclass(frozen=True)
class GymProblem:
    question: str
    answer: str
    reference: str  # names the entry for the verifier

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": f"{self.question}\n{INSTRUCTION}"}]


class ReasoningGymTasks(SplitTasks):
    """``size`` entries of dataset ``name`` (its ``config`` as keyword arguments), the last
    ``eval_fraction`` held out."""

    def __init__(self, name: str, seed: int = 0, eval_fraction: float = 0.1, size: int = 2000,
                 config: dict | None = None) -> None:
        n_eval = self.held_out(size, eval_fraction)
        config = dict(config or {})
        ds = gym_dataset(name, seed, size, json.dumps(config, sort_keys=True))
        problems = [GymProblem(e["question"], str(e["answer"]),
                               gym_reference(name, seed, size, config, i))
                    for i, e in enumerate(ds)]
        self.splits = {"train": problems[:-n_eval], "eval": problems[-n_eval:]}

    def sft_conversation(self, p: GymProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """The gold answer; with probability ``error_rate`` another train problem's answer."""
        answer = rng.choice(self.splits["train"]).answer if rng.random() < error_rate else p.answer
        return [*p.messages(), answer_turn(answer)]


@member("task", "reasoning_gym")
class ReasoningGymConfig(TaskFamily):
    """``reasoning_gym``: single-turn problems of reasoning-gym's ``dataset`` (``dataset_config``:
    its keyword arguments), scored by verifier ``reasoning_gym`` (plus ``format``, if wanted)."""

    SINGLE_TURN: ClassVar[bool] = True
    dataset: str = Field(description="the reasoning-gym dataset")
    dataset_config: dict[str, Any] = Field(default_factory=dict,
                                           description="the dataset's keyword arguments")

    def check(self, cfg) -> None:
        super().check(cfg)
        verifiers = {p.verifier for p in cfg.reward.parts.values()} - {"format"}
        if verifiers != {"reasoning_gym"}:
            raise ValueError("task.name=reasoning_gym is scored by the verifier reasoning_gym "
                             "(plus format, if wanted), and that verifier needs the task")

    def build(self, seed: int, models: Models) -> TaskParts:
        return TaskParts(ReasoningGymTasks(self.dataset, seed, self.eval_fraction,
                                           config=self.dataset_config))
