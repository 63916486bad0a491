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

from posttrain.cluster import RayTrainer, launch_engines, ray_session
from posttrain.config import RunConfig
from posttrain.data import generate_arithmetic_sft, load_chat_jsonl
from posttrain.data.preference_pairs import (
    PreferencePair,
    arithmetic_pairs,
    load_preference_jsonl,
)
from posttrain.engines import Engine, TorchEngine
from posttrain.engines.sglang_engine import SGLangEngine
from posttrain.engines.vllm_engine import VLLMEngine
from posttrain.envs import (
    EffortTask,
)
from posttrain.models import build_tiny, load_model, load_tokenizer, load_value_model, save_model
from posttrain.recipes import Reporter, plot_curves, run_rl, run_sft
from posttrain.recipes.build import build_judge, rollout_function, task_family
from posttrain.recipes.distillation.offline import check_same_vocabulary, run_distill
from posttrain.recipes.distillation.opd import OPDRun, run_opd
from posttrain.recipes.distillation.self_distill import self_teacher
from posttrain.recipes.distillation.teacher_logits import StoredLogits
from posttrain.recipes.distillation.teachers import Teacher
from posttrain.recipes.dpo import run_preference
from posttrain.recipes.reward_model import run_reward_model
from posttrain.recipes.rl import RLRun
from posttrain.recipes.rl_async import run_async_rl
from posttrain.recipes.sampling_loop import LoopRun
from posttrain.recipes.weight_sync import sync_weights
from posttrain.rewards import RewardFunction
from posttrain.rollout import evaluate
from posttrain.rollout.judged import JudgedRollout
from posttrain.settings import PairDataConfig, TrainerConfig
from posttrain.train import (
    PolicyTrainer,
    Trainer,
    latest_checkpoint,
    load_checkpoint_state,
    save_checkpoint,
)
from posttrain.train.checkpoint import CRITIC_DIR


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
        self.rollout_fn = rollout_function(cfg, self.tools, env_factory)
        self.eval_tasks = self.tasks.eval_set(cfg.eval.num_problems)
        if cfg.task.efforts:  # evaluate at the highest effort level
            self.eval_tasks = [EffortTask(t, max(cfg.task.efforts)) for t in self.eval_tasks]
        self.reward_fn = RewardFunction(
            {n: (p.verifier, p.weight) for n, p in cfg.reward.parts.items()}
        )

    def attach_judges(self, tokenizer) -> None:
        """Score ``reward.judges``' parts after every rollout (and evaluation)."""
        judges = self.cfg.reward.judges
        if judges and not isinstance(self.rollout_fn, JudgedRollout):
            self.rollout_fn = JudgedRollout(self.rollout_fn, {
                part: build_judge(j, tokenizer, self.cfg.model.dtype, self.cfg.seed)
                for part, j in judges.items()})

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

    def make_engine(self, model, model_dir: Path, tokenizer) -> Engine:
        """The rollout engine ``engine.name`` names, holding ``model``'s weights (those saved in
        ``model_dir``, which vLLM and SGLang load themselves)."""
        name, dtype = self.cfg.engine.name, self.cfg.model.dtype
        if name == "torch":
            return TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
        if name == "vllm":
            return VLLMEngine(model_dir, dtype, kv_cache_gib=self.cfg.engine.kv_cache_gib)
        return SGLangEngine(model_dir, dtype)

    def evaluate(self, engine: Engine, tokenizer) -> dict[str, float]:
        return evaluate(engine, tokenizer, self.eval_tasks, self.reward_fn, self.cfg.eval,
                        self.cfg.reward.accuracy_part, seed=self.cfg.seed,
                        rollout_fn=self.rollout_fn)

    def _checkpointer(self, trainer: PolicyTrainer, tokenizer, stage: str, every: int, evals: dict,
                      critic: Trainer | None = None):
        def on_step_end(step: int) -> None:
            if every and step % every == 0:
                cursor = {"stage": stage, "step": step, "evals": evals}
                save_checkpoint(self.ckpt_dir, trainer, tokenizer, cursor, f"{stage}-{step:06d}",
                                critic, write=self.rank == 0)

        return on_step_end

    def _loop_run(self, cls: type[LoopRun], trainer: PolicyTrainer, tokenizer, start: int,
                  evals: dict, **settings) -> LoopRun:
        """A sampling loop's run (``RLRun``, ``OPDRun``) on this recipe's tasks, reward and
        evaluation, checkpointing as ``cls.STAGE`` (with ``settings["critic"]``, if any)."""
        cfg = self.cfg
        checkpoint = self._checkpointer(trainer, tokenizer, cls.STAGE, cfg.checkpoint_every,
                                        evals, settings.get("critic"))
        return cls(trainer, tokenizer, self.tasks, self.eval_tasks, self.reward_fn, cfg.eval,
                   cfg.reward.accuracy_part, self.reporter, cfg.seed, start, checkpoint,
                   **settings)

    def _report_skipped(self, what: str, lines: list[int]) -> None:
        if lines:
            self.reporter.message(f"[yellow]skipped {len(lines)} malformed {what} rows (lines "
                                  f"{lines[:5]}{'...' if len(lines) > 5 else ''})")

    def _chat_data(self, path: str | None, n: int, error_rate: float, what: str
                   ) -> list[list[dict]]:
        """Conversations from the JSONL at ``path``, or ``n`` generated from the task with a
        share ``error_rate`` of flawed answers."""
        if path is not None:
            data = load_chat_jsonl(path)
            self._report_skipped(what, data.skipped_lines)
        else:
            data = generate_arithmetic_sft(self.tasks, n, error_rate, self.cfg.seed,
                                           self.cfg.task.efforts)
        return data.conversations

    def distill_data(self) -> list[list[dict]]:
        """The distill stage's conversations: ``distill.data``, or worked solutions."""
        d = self.cfg.distill
        return self._chat_data(d.data, d.num_examples, 0.0, "distillation")

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
        cursor = {"stage": None, "step": 0, "evals": {}}
        if ckpt is not None:
            cursor = torch.load(ckpt / "trainer_state.pt", weights_only=False)["cursor"]
            self.reporter.message(f"resuming from {ckpt.name}")
        model_dir = ckpt or self.base_model_dir()
        if ckpt is not None and cfg.trainer.lora is not None:
            # the checkpoint holds the merged model; the stage's adapter is in its state
            model_dir = self.start_dir(cursor["stage"])
        tokenizer, model = load_tokenizer(model_dir), load_model(model_dir, cfg.model.dtype)
        self.attach_judges(tokenizer)
        engine = self.make_engine(model, model_dir, tokenizer)
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
            elif stage == "distill":
                model = self._run_distill(model, tokenizer, engine, stage_ckpt, evals)
            elif stage == "opd":
                model = self._run_opd(model, tokenizer, engine, stage_ckpt, evals)
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
        data = self._chat_data(cfg.sft.data, cfg.sft.num_examples, cfg.sft.error_rate, "SFT")
        run_sft(trainer, tokenizer, data, cfg.sft, self.reporter, cfg.seed, start,
                self._checkpointer(trainer, tokenizer, "sft", cfg.checkpoint_every, evals),
                tools=self.tools.schemas() if self.tools else None)
        return trainer.export_model()

    def start_dir(self, stage: str) -> Path:
        """The model ``stage`` starts from: the previous stage's, or the base model."""
        i = self.cfg.stages.index(stage)
        return self.out / f"{self.cfg.stages[i - 1]}_model" if i else self.base_model_dir()

    def preference_pairs(self, pref: PairDataConfig
                         ) -> tuple[list[PreferencePair], list[PreferencePair]]:
        """Train and held-out pairs of ``pref`` (the ``pref`` or ``rm`` section): from its
        ``data`` (the last ``eval_pairs`` rows, at most a tenth, held out) or generated from
        the task's train and eval splits."""
        if pref.data is None:
            return (arithmetic_pairs(self.tasks, pref.num_pairs, self.cfg.seed),
                    arithmetic_pairs(self.tasks, pref.eval_pairs, self.cfg.seed, split="eval"))
        data = load_preference_jsonl(pref.data)
        self._report_skipped("preference", data.skipped_lines)
        held = min(pref.eval_pairs, len(data.pairs) // 10)
        return data.pairs[: len(data.pairs) - held], data.pairs[len(data.pairs) - held :]

    def scalar_head_settings(self) -> TrainerConfig:
        """A critic's or reward model's trainer settings: fully fine-tuned (``trainer.lora``
        adapts the policy; a fresh scalar head must train whole)."""
        return self.cfg.trainer.model_copy(update={"lora": None})

    def train_reward_model(self, backbone: Path, out: Path) -> list[dict[str, float]]:
        """A Bradley-Terry reward model on ``rm``'s pairs from ``backbone`` (a scalar head on
        its decoder), written to ``out``; returns the held-out evaluations."""
        cfg = self.cfg
        tokenizer = load_tokenizer(backbone)
        trainer = Trainer(load_value_model(backbone, cfg.model.dtype), cfg.rm.optim,
                          cfg.rm.steps, self.scalar_head_settings())
        pairs, held_out = self.preference_pairs(cfg.rm)
        evals = run_reward_model(trainer, tokenizer, pairs, cfg.rm, self.reporter, held_out,
                                 cfg.seed)
        save_model(trainer.export_model(), tokenizer, out)
        return evals

    def _run_pref(self, model, tokenizer, ckpt: Path | None, evals: dict):
        """Preference optimisation against a frozen copy of the stage's starting model;
        returns the trained model with whole weights."""
        cfg = self.cfg
        ref = load_model(self.start_dir("pref"), cfg.model.dtype) if ckpt else copy.deepcopy(
            model)
        trainer = Trainer(model, cfg.pref.optim, cfg.pref.steps, cfg.trainer, ref_model=ref)
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0
        pairs, held_out = self.preference_pairs(cfg.pref)
        run_preference(trainer, tokenizer, pairs, cfg.pref, self.reporter, held_out, cfg.seed,
                       start, self._checkpointer(trainer, tokenizer, "pref",
                                                 cfg.checkpoint_every, evals))
        return trainer.export_model()

    def _run_rl(self, model, tokenizer, engine: Engine, ckpt: Path | None, evals: dict):
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
                critic = Trainer(value_model, cfg.critic.optim, cfg.rl.steps,
                                 self.scalar_head_settings())
            start = load_checkpoint_state(ckpt, trainer, critic)["step"] if ckpt else 0
            run = self._loop_run(RLRun, trainer, tokenizer, start, evals, cfg=cfg.rl,
                                 algo=cfg.algo, actor=cfg.actor, critic=critic,
                                 critic_cfg=cfg.critic, shaping=cfg.reward.shaping)
            with self._rollout_engines(engine, start_dir, tokenizer) as engines:
                for e in engines:
                    sync_weights(trainer, e, start, cfg=cfg.rl.sync)
                if cfg.rl.mode == "async":
                    run_async_rl(run, engines)
                else:
                    run_rl(run, engines[0], cfg.task.efforts, self.rollout_fn)
            return trainer.export_model()

    def _run_distill(self, model, tokenizer, engine: Engine, ckpt: Path | None,
                     evals: dict):
        """Offline distillation from ``distill.teacher`` or ``distill.logits`` (GKD samples
        with ``engine``); returns the trained model with whole weights."""
        cfg, d = self.cfg, self.cfg.distill
        trainer = Trainer(model, d.optim, d.steps, cfg.trainer)
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0
        if d.teacher is not None:
            teacher, teacher_tok = load_model(d.teacher, cfg.model.dtype), load_tokenizer(
                d.teacher)
        else:
            teacher, teacher_tok = StoredLogits(d.logits), None
        if d.lam > 0:
            engine.update_weights(trainer.named_weights(), start)
        run_distill(trainer, teacher, tokenizer, teacher_tok, self.distill_data(), d.steps,
                    d.batch_size,
                    self.reporter, d.divergence.name, d.divergence.hyperparameters(), cfg.seed,
                    start, self._checkpointer(trainer, tokenizer, "distill",
                                              cfg.checkpoint_every, evals),
                    d.lam, engine if d.lam > 0 else None, d.max_new_tokens)
        return trainer.export_model()

    def _run_opd(self, model, tokenizer, engine: Engine, ckpt: Path | None, evals: dict):
        """On-policy distillation into ``model`` from ``opd.teachers`` (or itself, with
        ``opd.self_distill``); returns the trained model with whole weights."""
        cfg = self.cfg
        trainer = Trainer(model, cfg.opd.optim, cfg.opd.steps, cfg.trainer)
        start = load_checkpoint_state(ckpt, trainer)["step"] if ckpt else 0
        engine.update_weights(trainer.named_weights(), start)
        with self._dist_session():
            run = self._loop_run(OPDRun, trainer, tokenizer, start, evals, cfg=cfg.opd,
                                 actor=cfg.actor, efforts=cfg.task.efforts,
                                 teachers=self._teachers(tokenizer, trainer))
            run_opd(run, engine)
        return trainer.export_model()

    def _teachers(self, tokenizer, trainer: Trainer) -> list[Teacher]:
        """``opd.teachers`` loaded in-process or launched as Ray engine actors, or the
        student itself under ``opd.self_distill``."""
        opd, dtype = self.cfg.opd, self.cfg.model.dtype
        if opd.self_distill is not None:
            return [self_teacher(opd.self_distill, trainer.model)]
        teachers = []
        for spec in opd.teachers:
            check_same_vocabulary(tokenizer, load_tokenizer(spec.path))
            if opd.teacher_placement == "ray":
                where = {"engine": launch_engines(
                    self.cfg.dist.model_copy(update={"engines": 1}), Path(spec.path), dtype,
                    tokenizer.pad_token_id, tokenizer.eos_token_id)[0]}
            else:
                where = {"model": load_model(spec.path, dtype)}
            teachers.append(Teacher(spec.path, domains=tuple(spec.domains),
                                    efforts=tuple(spec.efforts), weight=spec.weight, **where))
        return teachers

    def _dist_session(self) -> contextlib.AbstractContextManager:
        if self.cfg.dist.backend == "local":
            return contextlib.nullcontext()
        return ray_session(self.cfg.dist, num_cpus=os.cpu_count())

    @contextlib.contextmanager
    def _rollout_engines(self, engine: Engine, model_dir: Path, tokenizer):
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
