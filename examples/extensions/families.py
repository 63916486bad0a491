"""A task family and a rollout engine of your own, each one class (docs/extending.md, "Your
own family member"): name them by dotted path in ``task.name`` / ``engine.name``.

    posttrain train configs/quickstart.yaml task.name=examples/extensions/families.py:Doubles
    posttrain eval MODEL engine.name=examples/extensions/families.py:LoggedTorch
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from posttrain.config.sections.task import TaskFamily, TaskParts
from posttrain.engines.torch_member import TorchEngineConfig
from posttrain.envs import ArithmeticTasks


class Doubles(TaskFamily):
    """``a + b`` with operands of ``digits`` digits, single turn: the section's fields are the
    member's config keys (``task.digits=3``), its class attributes what the run may assume."""

    SINGLE_TURN: ClassVar[bool] = True
    GENERATED: ClassVar[bool] = True  # SFT conversations can be generated from it
    digits: int = Field(1, ge=1, le=6)

    def check(self, cfg) -> None:
        super().check(cfg)  # the family's own rules
        if "rl" in cfg.stages and cfg.rl.max_new_tokens < self.digits + 20:
            raise ValueError(f"rl.max_new_tokens is too short for {self.digits}-digit sums")

    def build(self, seed, models) -> TaskParts:
        return TaskParts(ArithmeticTasks(("+",), self.digits, seed, self.eval_fraction))


class Logged:
    """An engine that appends each ``generate`` call's prompt count to ``log`` and otherwise
    is ``engine``."""

    def __init__(self, engine, log: Path) -> None:
        self.engine, self.log = engine, log

    def generate(self, prompts, sampling, seeds=None):
        with self.log.open("a") as f:
            f.write(f"{len(prompts)}\n")
        return self.engine.generate(prompts, sampling, seeds)

    def __getattr__(self, name):
        return getattr(self.engine, name)


class LoggedTorch(TorchEngineConfig):
    """The torch engine (``device`` and ``sleep`` as it has them), logging to ``log``."""

    log: str = "engine_calls.log"

    def build(self, model_dir, dtype, pad_token_id, eos_token_id, model=None,
              record_routing=False):
        engine = super().build(model_dir, dtype, pad_token_id, eos_token_id, model,
                               record_routing)
        return Logged(engine, Path(self.log))
