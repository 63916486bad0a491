"""Config -> what every stage of a run shares (``RunParts``): the task family (built in or
named by dotted path), the function that plays its episodes, the reward and its judges, the
held-out evaluation, and the run directory (models, checkpoints, the report)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain.config import ConfigError, RunConfig
from posttrain.data import ChatData, generate_arithmetic_sft, load_chat_data
from posttrain.data.preference_pairs import (
    PreferencePair,
    arithmetic_pairs,
    load_preference_data,
)
from posttrain.data.prompt_stream import StreamedDatasetTasks
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.engines import Engine
from posttrain.envs import (
    EffortTask,
)
from posttrain.harness import SwarmSettings, ToolRegistry
from posttrain.models import build_tiny
from posttrain.recipes.agent_tasks import check_row_tools, environment_factory, row_tools
from posttrain.recipes.judges.chats import ServedChats, build_guard
from posttrain.recipes.reporting import Reporter
from posttrain.recipes.run_dir import CHECKPOINTS, record_sizes
from posttrain.recipes.sampling_loop import LoopRun
from posttrain.recipes.skills import skill_library
from posttrain.rollout import AgentRollout, ExternalAgentRollout, command_agent, rollout
from posttrain.rollout.evaluation import absent_columns, evaluated
from posttrain.rollout.judged import JudgedRollout
from posttrain.settings import PairDataConfig
from posttrain.settings.extension import load_extension, load_tools
from posttrain.settings.task_family import TaskParts
from posttrain.skills.library import SkilledTasks
from posttrain.train import PolicyTrainer, Trainer, load_checkpoint_state, save_checkpoint
from posttrain.train.parallel import by_writer
from posttrain.types import Episode

SKILL_BANK = "skill_bank"  # the checkpoint cursor's copy of an evolving bank


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def task_family(cfg: RunConfig) -> TaskParts:
    """The task family ``task`` selects, built (``TaskParts``), with ``agent.tools`` added to
    its tools (the agent loop then plays the task; also for ``task.env`` without tools). A
    dataset row's own tools are checked against them (``agent_tasks.row_tools``)."""
    parts = cfg.task.build(cfg.seed, ServedChats(cfg.trainer.compute_dtype, cfg.seed))
    if cfg.agent.tools or cfg.task.env is not None:  # the agent loop plays the task
        parts.tools = parts.tools or ToolRegistry()
        for spec in cfg.agent.tools:
            for fn in load_tools(spec):
                parts.tools.add(fn)
    if cfg.task.ROW_TOOLS:  # a row's own tools must be implemented
        check_row_tools(parts.tasks, row_tools(parts.tools or ToolRegistry()))
    return parts


def rollout_function(cfg: RunConfig, tools: ToolRegistry | None,
                     env_factory: Callable | None) -> Callable[..., list[Episode]]:
    """What plays and scores episodes: ``task.rollout`` if named, the agent loop when the task
    has ``tools`` (with a dataset row's own tools, and ``task.env``'s environment), else one
    completion a sample."""
    if cfg.task.rollout is not None:
        return load_extension("rollout", cfg.task.rollout)
    agent = cfg.agent
    if agent.plays_externally:
        play = load_extension("external_agent", agent.external) if agent.external else \
            command_agent(agent.external_command, agent.timeout_s)
        return ExternalAgentRollout(play, agent.timeout_s)
    if tools is None:
        return rollout
    tree, guard, swarm = cfg.agent.tree, cfg.agent.guard, cfg.agent.swarm
    task_tools = row_tools(tools) if cfg.task.ROW_TOOLS else None
    return AgentRollout(
        tools, cfg.agent.limits(), cfg.agent.compaction,
        tree=None if tree is None else (tree.branches, tree.rounds), env_factory=env_factory,
        guard=None if guard is None else build_guard(guard, cfg.trainer.compute_dtype, cfg.seed),
        retain_reasoning=cfg.agent.retain_reasoning, task_tools=task_tools,
        task_env=environment_factory(cfg, task_tools or (lambda task: tools)),
        swarm=None if swarm is None else SwarmSettings(
            tools, swarm.max_subagents, replace(cfg.agent.limits(), max_turns=swarm.max_turns),
            swarm.prompt, swarm.target))


class RunParts:
    """What the stages of the run ``cfg`` describes share: ``tasks`` (and ``tools``), the
    ``rollout_fn`` that plays them, ``reward_fn``, the held-out ``eval_tasks``, the
    ``skills`` every task opens with (a ``SkillLibrary``; None without a ``skills``
    section), and the run directory ``out`` with its ``reporter`` and checkpoints.
    ``rank > 0``: a data-parallel peer of rank 0 (``dist.trainer_processes``): it reads the
    models and checkpoints rank 0 writes and logs quietly to ``out_dir/ranks/<rank>``."""

    def __init__(self, cfg: RunConfig, reporter: Reporter | None = None, rank: int = 0) -> None:
        self.cfg, self.rank = cfg, rank
        self.started, self.earlier_seconds = time.time(), []
        self.counters: dict[str, dict[str, int]] = {}  # per stage (``checkpointer``)
        self.skipped_rows: dict[str, dict] = {}  # what -> count, rows, first reason
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.reporter = reporter or (
            Reporter(self.out / "ranks" / str(rank), quiet=True) if rank else Reporter(self.out))
        self.ckpt_dir = self.out / CHECKPOINTS
        family = task_family(cfg)
        self.tasks, self.tools, env_factory = family.tasks, family.tools, family.env_factory
        self.skills = None if cfg.skills is None else skill_library(cfg.skills, self.out)
        if self.skills is not None and self.tools is not None and cfg.skills.tools:
            for tool in self.skills.tools():
                self.tools.add(tool)
        self.rollout_fn = rollout_function(cfg, self.tools, env_factory)
        self.eval_tasks = self.tasks.eval_set(cfg.eval.num_problems)
        if isinstance(self.tasks, StreamedDatasetTasks):  # train rows: once read through
            self.tasks.stream.on_first_pass = \
                lambda rows: self.report_skipped("train prompt", rows)
            self.report_skipped("eval prompt", self.tasks.skipped["eval"])
        elif isinstance(self.tasks, DatasetTasks):
            for split, rows in self.tasks.skipped.items():
                self.report_skipped(f"{split} prompt", rows)
        if cfg.task.efforts:  # evaluate at the highest effort level
            self.eval_tasks = [EffortTask(t, max(cfg.task.efforts)) for t in self.eval_tasks]
        if self.skills is not None:  # every episode opens with the skills disclosed
            self.tasks = SkilledTasks(self.tasks, self.skills)
            self.eval_tasks = [self.skills.task(t) for t in self.eval_tasks]
        self.reward_fn = cfg.reward.function()
        absent, have = absent_columns(self.eval_tasks, cfg.eval.group_by)
        if absent:
            raise ConfigError(f"eval.group_by: no held-out task has {', '.join(absent)} "
                              f"(columns: {', '.join(have) or 'none'})")

    def attach_judges(self, tokenizer) -> None:
        """Score ``reward.judges``' parts after every rollout (and evaluation)."""
        judges = self.cfg.reward.judges
        if judges and not isinstance(self.rollout_fn, JudgedRollout):
            self.rollout_fn = JudgedRollout(self.rollout_fn, {
                part: j.build(tokenizer, self.cfg.trainer.compute_dtype, self.cfg.seed)
                for part, j in judges.items()})

    def evaluate(self, engine: Engine, tokenizer, name: str | None = None
                 ) -> dict[str, float]:
        """``evaluation``'s metrics; with a ``name``, its samples go to the trackers as it."""
        episodes, metrics = self.evaluation(engine, tokenizer)
        if name is not None:
            self.reporter.samples(name, episodes, tokenizer)
        return metrics

    def evaluation(self, engine: Engine, tokenizer) -> tuple[list[Episode], dict[str, float]]:
        """The held-out episodes (``eval.samples`` a problem) and their metrics."""
        return evaluated(engine, tokenizer, self.eval_tasks, self.reward_fn, self.cfg.eval,
                         self.cfg.reward.accuracy_part, self.cfg.seed, self.rollout_fn)

    # -- the run directory -----------------------------------------------------------------
    def base_model_dir(self) -> Path:
        if self.cfg.model.path is not None:
            return Path(self.cfg.model.path)
        d = self.out / "base_model"
        self.on_rank0(lambda: (d / "config.json").is_file() or build_tiny(
            d, self.cfg.model.preset, seed=self.cfg.seed,
            architecture=self.cfg.model.architecture))
        return d

    def start_dir(self, stage: str) -> Path:
        """The model ``stage`` starts from: the previous stage's, or the base model."""
        i = self.cfg.stages.index(stage)
        return self.out / f"{self.cfg.stages[i - 1]}_model" if i else self.base_model_dir()

    def on_rank0(self, write: Callable[[], object]) -> None:
        """``write`` on rank 0 only; in a process group, every rank waits for it."""
        by_writer(self.rank == 0, write)

    def resume(self, ckpt: Path | None, trainer: PolicyTrainer,
               critic: Trainer | None = None) -> int:
        """The step a stage starts at: 0, or the checkpoint's (its state loaded, and the skill
        bank as it was then)."""
        if ckpt is None:
            return 0
        cursor = load_checkpoint_state(ckpt, trainer, critic)
        if SKILL_BANK in cursor:
            self.skills.restore(cursor[SKILL_BANK])
        return cursor["step"]

    def checkpointer(self, trainer: PolicyTrainer, tokenizer, stage: str, evals: dict,
                     critic: Trainer | None = None) -> Callable[[int], None]:
        """``on_step_end``: the stage's ``counters`` (the trainer's optimiser steps and
        micro-batches, the checkpoints written), and a checkpoint every ``checkpoint_every``
        steps. Its cursor holds the stage, its step, the evaluations and counters so far, the
        records' lengths and each process's seconds."""
        every = self.cfg.checkpoint_every

        def on_step_end(step: int) -> None:
            counts = self.counters.setdefault(stage, {"checkpoints": 0})
            counts |= trainer.apply(Trainer.counters)
            if every and step % every == 0:
                counts["checkpoints"] += 1
                cursor = {"stage": stage, "step": step, "evals": evals,
                          "counters": self.counters, "records": record_sizes(self.out),
                          "process_seconds": self.process_seconds()}
                if self.cfg.skills is not None and self.cfg.skills.teacher is not None:
                    cursor[SKILL_BANK] = self.skills.snapshot()  # the bank evolves
                save_checkpoint(self.ckpt_dir, trainer, tokenizer, cursor, f"{stage}-{step:06d}",
                                critic, write=self.rank == 0, keep_last=self.cfg.keep_last,
                                sharded=self.cfg.checkpoint_format == "sharded")

        return on_step_end

    def process_seconds(self) -> list[float]:
        """Wall seconds of each process of the run so far: the earlier ones' up to the
        checkpoint this one resumed from, then this one's."""
        return [*self.earlier_seconds, time.time() - self.started]

    def loop_run(self, cls: type[LoopRun], trainer: PolicyTrainer, tokenizer, start: int,
                 evals: dict, **settings: Any) -> LoopRun:
        """A sampling loop's run (``RLRun``, ``OPDRun``) on this run's tasks, reward and
        evaluation, checkpointing as ``cls.STAGE`` (with ``settings["critic"]``, if any)."""
        cfg = self.cfg
        checkpoint = self.checkpointer(trainer, tokenizer, cls.STAGE, evals,
                                       settings.get("critic"))
        return cls(trainer, tokenizer, self.tasks, self.eval_tasks, self.reward_fn, cfg.eval,
                   cfg.reward.accuracy_part, self.reporter, cfg.seed, start, checkpoint,
                   **settings)

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

    # -- data --------------------------------------------------------------------------------
    def report_skipped(self, what: str, skipped: list[tuple[int, str]]) -> None:
        """Say how many ``what`` rows were skipped, which, and why the first was; the run's
        summary keeps it (``skipped_rows``)."""
        if skipped:
            from rich.markup import escape

            rows = [i for i, _ in skipped]
            self.skipped_rows[what] = {"count": len(rows), "rows": rows[:20],
                                       "first_reason": skipped[0][1]}
            self.reporter.message(
                f"[yellow]skipped {len(rows)} malformed {what} rows (rows {rows[:5]}"
                f"{'...' if len(rows) > 5 else ''}, counting from 0; row {rows[0]}: "
                f"{escape(skipped[0][1])})")

    def conversations(self, path: str | None, n: int, error_rate: float, what: str
                      ) -> ChatData:
        """Conversations from the dataset at ``path`` (with their rows' tools, else the
        task's), or ``n`` generated from the task with a share ``error_rate`` of flawed
        answers."""
        if path is not None:
            data = load_chat_data(path)
            self.report_skipped(what, data.skipped)
        else:
            data = generate_arithmetic_sft(self.tasks, n, error_rate, self.cfg.seed,
                                           self.cfg.task.efforts)
        task_tools = self.tools.schemas() if self.tools else None
        data.tools = [row_tools or task_tools for row_tools in data.tools]
        return data

    def distill_data(self) -> ChatData:
        """The distill stage's conversations: ``distill.data``, or worked solutions."""
        d = self.cfg.distill
        return self.conversations(d.data, d.num_examples, 0.0, "distillation")

    def preference_pairs(self, pref: PairDataConfig
                         ) -> tuple[list[PreferencePair], list[PreferencePair]]:
        """Train and held-out pairs of ``pref`` (the ``pref`` or ``rm`` section): from its
        ``data`` (the last ``eval_pairs`` rows, at most a tenth, held out) or generated from
        the task's train and eval splits."""
        if pref.data is None:
            return (arithmetic_pairs(self.tasks, pref.num_pairs, self.cfg.seed),
                    arithmetic_pairs(self.tasks, pref.eval_pairs, self.cfg.seed, split="eval"))
        data = load_preference_data(pref.data)
        self.report_skipped("preference", data.skipped)
        held = min(pref.eval_pairs, len(data.pairs) // 10)
        return data.pairs[: len(data.pairs) - held], data.pairs[len(data.pairs) - held :]
