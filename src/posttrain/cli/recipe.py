"""The SFT -> RL recipe a ``RunConfig`` describes, with evaluation around each stage.

Checkpoints go to ``<out_dir>/checkpoints``; ``resume=True`` continues from the newest one
(the stage, its step and the evaluations so far are in its cursor).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain.config import RunConfig
from posttrain.dist import RayTrainer, launch_engines, ray_session
from posttrain.engines import TorchEngine
from posttrain.envs import (
    ArithmeticTasks,
    CalculatorTasks,
    CodeTasks,
    EffortTask,
    ReasoningGymTasks,
    SearchTasks,
    calculate,
)
from posttrain.harness import Guard, ToolRegistry
from posttrain.models import build_tiny, load_model, load_tokenizer, load_value_model, save_model
from posttrain.pipelines import (
    Reporter,
    evaluate,
    generate_arithmetic_sft,
    load_chat_jsonl,
    plot_curves,
    run_rl,
    run_sft,
)
from posttrain.pipelines.agent_rollout import AgentRollout
from posttrain.pipelines.async_rl import run_async_rl
from posttrain.pipelines.preference import run_preference
from posttrain.pipelines.preference_data import (
    PreferencePair,
    arithmetic_pairs,
    load_preference_jsonl,
)
from posttrain.pipelines.rl_run import RLRun
from posttrain.pipelines.rollout import rollout
from posttrain.pipelines.weight_sync import sync_weights
from posttrain.rewards import RewardFunction
from posttrain.train import Trainer, latest_checkpoint, load_checkpoint_state, save_checkpoint
from posttrain.train.checkpoint import CRITIC_DIR


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def task_family(cfg: RunConfig) -> tuple[Any, ToolRegistry | None, Callable | None]:
    """The task source, the tools the model is shown (None: single turn, no agent loop) and
    the per-episode environment factory (tasks whose tools hold per-episode state)."""
    t = cfg.task
    if t.name == "search":
        tasks = SearchTasks(cfg.seed, t.eval_fraction)
        return tasks, ToolRegistry([tasks.tool]), None
    if t.name == "code":
        tasks = CodeTasks(cfg.seed, t.eval_fraction, policy=t.submissions)
        return tasks, tasks.tools, tasks.make_env
    if t.name == "reasoning_gym":
        return ReasoningGymTasks(t.dataset, cfg.seed, t.eval_fraction,
                                 config=t.dataset_config), None, None
    if t.name == "calculator":
        tasks = CalculatorTasks(tuple(t.ops), t.digits, cfg.seed, t.eval_fraction)
        return tasks, ToolRegistry([calculate]), None
    return ArithmeticTasks(tuple(t.ops), t.digits, cfg.seed, t.eval_fraction), None, None


class Recipe:
    """Wires config -> model, task, reward, engine, trainers, and runs the stages."""

    def __init__(self, cfg: RunConfig, reporter: Reporter | None = None, rank: int = 0) -> None:
        """``rank > 0``: a data-parallel peer of rank 0 (``dist.trainer_processes``): it reads
        the models and checkpoints rank 0 writes and logs quietly to ``out_dir/ranks/<rank>``."""
        self.cfg = cfg
        self.rank = rank
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.reporter = reporter or (
            Reporter(self.out / "ranks" / str(rank), quiet=True) if rank else Reporter(self.out))
        self.ckpt_dir = self.out / "checkpoints"
        self.tasks, self.tools, env_factory = task_family(cfg)
        tree, guard = cfg.agent.tree, cfg.agent.guard
        self.rollout_fn = rollout if self.tools is None else AgentRollout(
            self.tools, cfg.agent.limits(), cfg.agent.compaction,
            tree=None if tree is None else (tree.branches, tree.rounds), env_factory=env_factory,
            guard=None if guard is None else Guard(protected_paths=guard.protected_paths,
                                                   on_hack=guard.on_hack))
        self.eval_tasks = self.tasks.eval_set(cfg.eval.num_problems)
        if cfg.task.efforts:  # evaluate at the highest effort level
            self.eval_tasks = [EffortTask(t, max(cfg.task.efforts)) for t in self.eval_tasks]
        self.reward_fn = RewardFunction(
            {n: (p.verifier, p.weight) for n, p in cfg.reward.parts.items()}
        )

    # -- pieces ------------------------------------------------------------------------------
    def base_model_dir(self) -> Path:
        if self.cfg.model.path is not None:
            return Path(self.cfg.model.path)
        d = self.out / "base_model"
        self._on_rank0(lambda: (d / "config.json").is_file() or build_tiny(
            d, self.cfg.model.preset, seed=self.cfg.seed))
        return d

    def _on_rank0(self, write: Callable[[], object]) -> None:
        """``write`` on rank 0 only; in a process group, every rank waits for it."""
        if self.rank == 0:
            write()
        if torch.distributed.is_initialized():
            torch.distributed.barrier()

    def evaluate(self, engine: TorchEngine, tokenizer) -> dict[str, float]:
        return evaluate(engine, tokenizer, self.eval_tasks, self.reward_fn, self.cfg.eval,
                        self.cfg.reward.accuracy_part, seed=self.cfg.seed,
                        rollout_fn=self.rollout_fn)

    def _checkpointer(self, trainer: Trainer, tokenizer, stage: str, every: int, evals: dict,
                      critic: Trainer | None = None):
        def on_step_end(step: int) -> None:
            if every and step % every == 0:
                cursor = {"stage": stage, "step": step, "evals": evals}
                save_checkpoint(self.ckpt_dir, trainer, tokenizer, cursor, f"{stage}-{step:06d}",
                                critic, write=self.rank == 0)

        return on_step_end

    def _report_skipped(self, what: str, lines: list[int]) -> None:
        if lines:
            self.reporter.message(f"[yellow]skipped {len(lines)} malformed {what} rows (lines "
                                  f"{lines[:5]}{'...' if len(lines) > 5 else ''})")

    def _sft_data(self) -> list[list[dict]]:
        if self.cfg.sft.data is not None:
            data = load_chat_jsonl(self.cfg.sft.data)
            self._report_skipped("SFT", data.skipped_lines)
        else:
            data = generate_arithmetic_sft(
                self.tasks, self.cfg.sft.num_examples, self.cfg.sft.error_rate, self.cfg.seed,
                self.cfg.task.efforts,
            )
        return data.conversations

    # -- run ---------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> dict[str, Any]:
        cfg, start = self.cfg, time.time()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.set_flush_denormal(True)
        seed_everything(cfg.seed)
        ckpt = latest_checkpoint(self.ckpt_dir) if resume else None
        if resume and ckpt is None:
            self.reporter.message("[yellow]no checkpoint to resume from; starting fresh")
        if ckpt is None:
            self.reporter.path.unlink(missing_ok=True)
        model_dir = ckpt or self.base_model_dir()
        tokenizer, model = load_tokenizer(model_dir), load_model(model_dir, cfg.model.dtype)
        engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
        cursor = {"stage": None, "step": 0, "evals": {}}
        if ckpt is not None:
            cursor = torch.load(ckpt / "trainer_state.pt", weights_only=False)["cursor"]
            self.reporter.message(f"resuming from {ckpt.name}")
        evals: dict[str, dict] = cursor["evals"]
        if "eval_before" not in evals:
            evals["eval_before"] = self.evaluate(engine, tokenizer)
        stages = cfg.stages
        if cursor["stage"] is not None:
            stages = stages[stages.index(cursor["stage"]):]
        for stage in stages:
            stage_ckpt = ckpt if ckpt is not None and cursor["stage"] == stage else None
            if stage == "sft":
                model = self._run_sft(model, tokenizer, stage_ckpt, evals)
            elif stage == "pref":
                model = self._run_pref(model, tokenizer, stage_ckpt, evals)
            else:
                model = self._run_rl(model, tokenizer, engine, stage_ckpt, evals)
            self._on_rank0(lambda: save_model(model, tokenizer, self.out / f"{stage}_model"))
            engine.update_weights(((n, p.detach()) for n, p in model.named_parameters()), 0)
            evals[f"eval_after_{stage}"] = self.evaluate(engine, tokenizer)
        summary = {**evals, "wall_seconds": time.time() - start, "out_dir": str(self.out)}
        if self.rank == 0:
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
            plot_curves(self.out / "metrics.jsonl", self.out / "curves.png")
        return summary

    def _run_sft(self, model, tokenizer, ckpt: Path | None, evals: dict):
        """SFT; returns the trained model with whole weights (``Trainer.export_model``)."""
        cfg = self.cfg
        trainer = Trainer(model, cfg.sft.optim, cfg.sft.steps, cfg.trainer)
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0
        run_sft(trainer, tokenizer, self._sft_data(), cfg.sft, self.reporter, cfg.seed, start,
                self._checkpointer(trainer, tokenizer, "sft", cfg.checkpoint_every, evals),
                tools=self.tools.schemas() if self.tools else None)
        return trainer.export_model()

    def start_dir(self, stage: str) -> Path:
        """The model ``stage`` starts from: the previous stage's, or the base model."""
        i = self.cfg.stages.index(stage)
        return self.out / f"{self.cfg.stages[i - 1]}_model" if i else self.base_model_dir()

    def _preference_pairs(self) -> tuple[list[PreferencePair], list[PreferencePair]]:
        """Train and held-out pairs: from ``pref.data`` (its last ``eval_pairs`` rows, at most
        a tenth, held out) or generated from the task's train and eval splits."""
        pref = self.cfg.pref
        if pref.data is None:
            return (arithmetic_pairs(self.tasks, pref.num_pairs, self.cfg.seed),
                    arithmetic_pairs(self.tasks, pref.eval_pairs, self.cfg.seed, split="eval"))
        data = load_preference_jsonl(pref.data)
        self._report_skipped("preference", data.skipped_lines)
        held = min(pref.eval_pairs, len(data.pairs) // 10)
        return data.pairs[: len(data.pairs) - held], data.pairs[len(data.pairs) - held :]

    def _run_pref(self, model, tokenizer, ckpt: Path | None, evals: dict):
        """Preference optimisation against a frozen copy of the stage's starting model;
        returns the trained model with whole weights."""
        cfg = self.cfg
        ref = load_model(self.start_dir("pref"), cfg.model.dtype) if ckpt else copy.deepcopy(
            model)
        trainer = Trainer(model, cfg.pref.optim, cfg.pref.steps, cfg.trainer, ref_model=ref)
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0
        pairs, held_out = self._preference_pairs()
        run_preference(trainer, tokenizer, pairs, cfg.pref, self.reporter, held_out, cfg.seed,
                       start, self._checkpointer(trainer, tokenizer, "pref",
                                                 cfg.checkpoint_every, evals))
        return trainer.export_model()

    def _run_rl(self, model, tokenizer, engine: TorchEngine, ckpt: Path | None, evals: dict):
        """RL; returns the trained model with whole weights (``Trainer.export_model``)."""
        cfg = self.cfg
        start_dir = self.start_dir("rl")
        ref = None
        if cfg.algo.kl.coef > 0:
            ref = load_model(start_dir, cfg.model.dtype) if ckpt else copy.deepcopy(model)
        with self._dist_session():
            trainer = (RayTrainer if cfg.dist.trainer_actor else Trainer)(
                model, cfg.rl.optim, cfg.rl.steps, cfg.trainer, ref_model=ref)
            critic = None
            if cfg.critic.enabled:
                value_model = load_value_model(ckpt / CRITIC_DIR if ckpt else start_dir,
                                               cfg.model.dtype)
                critic = Trainer(value_model, cfg.critic.optim, cfg.rl.steps, cfg.trainer)
            start = load_checkpoint_state(ckpt, trainer, critic)["step"] if ckpt else 0
            run = RLRun(trainer, tokenizer, self.tasks, self.eval_tasks, self.reward_fn, cfg.rl,
                        cfg.algo, cfg.actor, cfg.eval, cfg.reward.accuracy_part, self.reporter,
                        cfg.seed, start,
                        self._checkpointer(trainer, tokenizer, "rl", cfg.checkpoint_every,
                                           evals, critic),
                        critic, cfg.critic, cfg.reward.shaping)
            with self._rollout_engines(engine, start_dir, tokenizer) as engines:
                for e in engines:
                    sync_weights(trainer, e, start, cfg=cfg.rl.sync)
                if cfg.rl.mode == "async":
                    run_async_rl(run, engines)
                else:
                    run_rl(run, engines[0], cfg.task.efforts, self.rollout_fn)
            return trainer.export_model()

    def _dist_session(self) -> contextlib.AbstractContextManager:
        if self.cfg.dist.backend == "local":
            return contextlib.nullcontext()
        return ray_session(self.cfg.dist, num_cpus=os.cpu_count())

    @contextlib.contextmanager
    def _rollout_engines(self, engine: TorchEngine, model_dir: Path, tokenizer):
        """The RL stage's engines: ``engine`` itself, or Ray actors (``dist.backend: ray``,
        inside ``_dist_session``)."""
        dist = self.cfg.dist
        if dist.backend == "ray":
            yield launch_engines(dist, model_dir, self.cfg.model.dtype, tokenizer.pad_token_id,
                                 tokenizer.eos_token_id)
        elif self.cfg.rl.mode == "async":
            # the rollout thread and the trainer share this process's cores: split them
            threads = torch.get_num_threads()
            torch.set_num_threads(max(1, threads // 2))
            try:
                yield [engine]
            finally:
                torch.set_num_threads(threads)
        else:
            yield [engine]


def run_rank(cfg: RunConfig, resume: bool) -> dict[str, Any]:
    """One process of a ``dist.trainer_processes`` run (inside its process group)."""
    return Recipe(cfg, rank=torch.distributed.get_rank()).run(resume=resume)
