"""A run's directory and what every stage of it shares (``RunParts``): ``RunTasks`` (the task,
its rollout, reward, judges and evaluation) plus the run directory (models, checkpoints, the
report)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain.config import RunConfig
from posttrain.data.curriculum import CurriculumTasks
from posttrain.engines import Engine
from posttrain.hooks import TrainerAddon, hooked
from posttrain.models import save_model
from posttrain.models.tiny import starting_model
from posttrain.recipes.run_dir import CHECKPOINTS, CURRICULUM
from posttrain.recipes.run_tasks import RunTasks
from posttrain.recipes.sampling_loop import Checkpointer, LoopRun
from posttrain.reporting import Reporter
from posttrain.train import PolicyTrainer, Trainer, load_checkpoint_state
from posttrain.train.parallel import by_writer


def seed_everything(seed: int, device: torch.device | None = None) -> None:
    """Seed Python, NumPy and torch. On a CPU ``device`` the kernels that have a deterministic
    variant use it: with several threads a run otherwise differs from process to process (in
    the 6th digit of ``grad_norm`` after a few SFT steps of ``configs/curio.yaml``, and more
    after RL); CUDA keeps its faster kernels (docs/performance.md, "Reproducibility")."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if device is not None and device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False  # values, not speed


class RunParts(RunTasks):
    """What the stages of the run ``cfg`` describes share: its ``RunTasks`` and the run
    directory ``out`` with its ``reporter`` and checkpoints. ``rank > 0``: a data-parallel peer
    of rank 0 (``dist.trainer_processes``): it reads the models and checkpoints rank 0 writes
    and logs quietly to ``out_dir/ranks/<rank>``."""

    def __init__(self, cfg: RunConfig, reporter: Reporter | None = None, rank: int = 0) -> None:
        self.rank = rank
        self.started, self.earlier_seconds = time.time(), []
        self.counters: dict[str, dict[str, int]] = {}  # per stage (``checkpointer``)
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.reporter = reporter or (
            Reporter(self.out / "ranks" / str(rank), quiet=True) if rank else Reporter(self.out))
        self.ckpt_dir = self.out / CHECKPOINTS
        self.addons: list[TrainerAddon] | None = None  # one set for the run's stages
        super().__init__(cfg, self.reporter, self.out)

    def save_stage_model(self, model, tokenizer, stage: str) -> None:
        """``stage``'s model to ``<stage>_model``, with the trainer add-ons beside it."""
        save_model(model, tokenizer, self.out / f"{stage}_model")
        for addon in self.addons or ():
            addon.save(self.out / f"{stage}_model")

    def trainer_addons(self, model) -> list[TrainerAddon]:
        """The features' trainer add-ons (hook ``trainer_addon``), shared by the run's stages:
        made for the first stage's policy ``model``."""
        if self.addons is None:
            self.addons = [addon for make in hooked("trainer_addon")
                           if (addon := make(self, model)) is not None]
        return self.addons

    def evaluate_logged(self, engine: Engine, tokenizer, name: str | None = None
                 ) -> dict[str, float]:
        """``evaluate``'s metrics; with a ``name``, its samples go to the trackers as it."""
        episodes, metrics = self.evaluate(engine, tokenizer)
        if name is not None:
            self.reporter.samples(name, episodes, tokenizer)
        return metrics

    # -- the run directory -----------------------------------------------------------------
    def base_model_dir(self) -> Path:
        """The run's starting model as the ``model`` section describes it: a preset built in
        ``base_model``, or ``model.path`` (copied there when it needs additions:
        ``models.tiny.starting_model``)."""
        d = self.out / "base_model"
        where, write = starting_model(d, self.cfg.seed, **self.cfg.model.model_dump())
        if write is not None:
            self.on_rank0(lambda: (d / "config.json").is_file() or write())
        return where

    def start_dir(self, stage: str) -> Path:
        """The model ``stage`` starts from: the previous stage's, or the base model."""
        i = self.cfg.stages.index(stage)
        return self.out / f"{self.cfg.stages[i - 1]}_model" if i else self.base_model_dir()

    def on_rank0(self, write: Callable[[], object]) -> None:
        """``write`` on rank 0 only; in a process group, every rank waits for it."""
        by_writer(self.rank == 0, write)

    def resume(self, ckpt: Path | None, trainer: PolicyTrainer,
               critic: Trainer | None = None) -> int:
        """The step a stage starts at: 0, or the checkpoint's (its state loaded, and the
        features' as it was then: their ``resume`` hooks)."""
        if ckpt is None:
            return 0
        cursor = load_checkpoint_state(ckpt, trainer, critic)
        for restore in hooked("resume"):
            restore(self, cursor)
        return cursor["step"]

    def checkpointer(self, trainer: PolicyTrainer, tokenizer, stage: str, evals: dict,
                     critic: Trainer | None = None) -> Checkpointer:
        """``on_step_end`` of ``stage``: its counters and checkpoints (``Checkpointer``)."""
        return Checkpointer(self, trainer, tokenizer, stage, evals, critic)

    def process_seconds(self) -> list[float]:
        """Wall seconds of each process of the run so far: the earlier ones' up to the
        checkpoint this one resumed from, then this one's."""
        return [*self.earlier_seconds, time.time() - self.started]

    def loop_run(self, cls: type[LoopRun], trainer: PolicyTrainer, tokenizer, start: int,
                 evals: dict, **settings: Any) -> LoopRun:
        """A sampling loop's run (``RLRun``, ``OPDRun``) on this run's tasks (drawn by
        ``task.curriculum`` for RL), reward and evaluation, checkpointing as ``cls.STAGE``
        (with ``settings["critic"]``, if any)."""
        cfg = self.cfg
        checkpoint = self.checkpointer(trainer, tokenizer, cls.STAGE, evals, settings.get("critic"))
        tasks = self.tasks
        if cfg.task.curriculum is not None and cls.STAGE == "rl":  # (after a resume's cut)
            tasks = CurriculumTasks(tasks, cfg.task.curriculum, cfg.reward.accuracy_part,
                                    cfg.seed, self.out / CURRICULUM)
        return cls(trainer, tokenizer, tasks, self.eval_tasks, self.reward_fn, cfg.eval,
                   cfg.reward.accuracy_part, self.reporter, cfg.seed, start, checkpoint,
                   features=cfg.features, variants=self.variants, **settings)

    def unevaluated(self) -> str | None:
        """Why the run's held-out evaluation would say nothing of what it trains (None when it
        would): every stage learns from the user's own data (``sft.data``, ``pref.data``,
        ``distill.data``) while the task is a generated one, whose problems are not the data's
        (``posttrain sft`` on tool traces printed the arithmetic task's table)."""
        cfg = self.cfg
        given = {s for s in ("sft", "pref", "distill") if getattr(cfg, s).data is not None}
        if not cfg.task.GENERATED or not set(cfg.stages) <= given:
            return None
        return (f"every stage trains on your own data ({', '.join(sorted(given))}.data) and "
                f"task {cfg.task.name!r} is generated: set task.name=dataset with task.data "
                "(held-out prompts of yours) to evaluate on them")

    @staticmethod
    def keep_final_eval(stage: str, made: list[dict], steps: int, evals: dict) -> None:
        """A stage's held-out evaluation after its last step (``made``: the loop's, by step)
        is that of its final model: kept as ``eval_after_<stage>``, which the recipe then does
        not evaluate again."""
        if made and made[-1]["step"] == steps:
            evals[f"eval_after_{stage}"] = {k: v for k, v in made[-1].items() if k != "step"}
