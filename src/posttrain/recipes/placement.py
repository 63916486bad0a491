"""Where a run's pieces execute: the rollout engine every command samples with (the member
``engine.name`` selects builds it), the RL stage's engines (it, or Ray engine actors), the
policy trainer (in-process or a Ray actor), the critic, the distillation teachers (in-process
or Ray actors) and the Ray session."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from posttrain.algos import entry
from posttrain.cluster import RayTrainer, close_engines, launch_engines, ray_session
from posttrain.config import OptimConfig, RunConfig, TrainerConfig
from posttrain.engines import Engine
from posttrain.hooks import TrainerAddon, hooked
from posttrain.models import check_same_vocabulary, load_model, load_tokenizer, load_value_model
from posttrain.models.devices import placed
from posttrain.recipes.distillation.self_distill import self_teacher
from posttrain.recipes.distillation.teachers import Teacher
from posttrain.rollout.rank_shared import MirrorEngine, group_rank
from posttrain.train import PolicyTrainer, Trainer, is_sharded
from posttrain.train.checkpoint import CRITIC_DIR


def make_engine(cfg: RunConfig, model_dir: Path, tokenizer, model=None,
                start_dir: Path | None = None) -> Engine:
    """The rollout engine ``engine`` describes (its member's ``build``), holding the model
    saved in ``model_dir`` (an in-process engine takes ``model``, if loaded, as it is), in the
    trainer's compute dtype: what every command that samples a run's model samples with.
    With ``start_dir``, the run's starting model, the features' engine add-ons start from
    beside it (hook ``engine_options``; else from beside ``model_dir``)."""
    options: dict = {}
    for make in hooked("engine_options") if start_dir is not None else ():
        options |= make(cfg, start_dir)
    return cfg.engine.build(model_dir, cfg.trainer.compute_dtype, tokenizer.pad_token_id,
                            tokenizer.eos_token_id, model=model,
                            record_routing=cfg.trainer.routing_replay, **options)


def cluster_session(cfg: RunConfig) -> contextlib.AbstractContextManager:
    """A Ray session for ``dist.backend: ray`` (nothing for ``local``, nor on a trainer
    process group's other ranks: rank 0 drives the engines)."""
    if cfg.dist.backend == "local" or group_rank():
        return contextlib.nullcontext()
    return ray_session(cfg.dist, num_cpus=os.cpu_count())


@contextlib.contextmanager
def rollout_engines(cfg: RunConfig, engine: Engine, model_dir: Path,
                    tokenizer) -> Iterator[list[Engine]]:
    """The RL stage's engines: ``engine`` itself, or Ray actors (``dist.backend: ray``,
    inside ``cluster_session``); on a trainer process group's other ranks, a
    ``MirrorEngine`` for each of rank 0's (``rollout.rank_shared``). An async run on one
    machine splits its cores between the rollout thread and the trainer."""
    dist = cfg.dist
    if group_rank():
        adapters = getattr(cfg.engine, "lora_rank", None) is not None
        yield [MirrorEngine(adapters) for _ in range(dist.engines if dist.backend == "ray" else 1)]
    elif dist.backend == "ray":
        engines = launch_engines(dist, model_dir, cfg.trainer.compute_dtype,
                                 tokenizer.pad_token_id, tokenizer.eos_token_id, cfg.engine)
        try:
            yield engines
        finally:
            close_engines(engines)
    elif cfg.rl.mode == "async":
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads // 2))
        try:
            yield [engine]
        finally:
            torch.set_num_threads(threads)
    else:
        yield [engine]


def reference_model(cfg: RunConfig, model, start_dir: Path, resumed: bool):
    """A frozen copy of the model the stage starts from (reloaded when resuming), in the
    trainer's compute dtype."""
    dtype = cfg.trainer.compute_dtype
    if resumed:
        return load_model(start_dir, dtype)
    return copy.deepcopy(model).to(getattr(torch, dtype))


def policy_trainer(cfg: RunConfig, model, optim: OptimConfig, steps: int,
                   ref_model=None, addons: Sequence[TrainerAddon] = ()) -> PolicyTrainer:
    """The policy's trainer: in this process (with the run's trainer ``addons``), or a Ray
    actor (``dist.trainer_actor``)."""
    if cfg.dist.trainer_actor:
        return RayTrainer(model, optim, steps, cfg.trainer, ref_model=ref_model)
    return Trainer(model, optim, steps, cfg.trainer, ref_model=ref_model, addons=addons)


def scalar_head_settings(cfg: RunConfig) -> TrainerConfig:
    """A critic's or reward model's trainer settings: fully fine-tuned (``trainer.lora``
    adapts the policy; a fresh scalar head must train whole)."""
    return cfg.trainer.model_copy(update={"lora": None})


def critic_trainer(cfg: RunConfig, start_dir: Path, ckpt: Path | None) -> Trainer | None:
    """PPO's critic (``critic.enabled``): a scalar head on the starting model's backbone, or
    the checkpoint's critic (a sharded checkpoint's fills the starting one when it resumes)."""
    if not cfg.critic.enabled:
        return None
    whole = ckpt is not None and not is_sharded(ckpt)
    value_model = load_value_model(ckpt / CRITIC_DIR if whole else start_dir)
    return Trainer(value_model, cfg.critic.optim, cfg.rl.steps, scalar_head_settings(cfg))


def teachers(cfg: RunConfig, tokenizer, student: torch.nn.Module) -> list[Teacher]:
    """``opd.teachers`` loaded in-process or launched as Ray engine actors, or the
    ``student`` itself under ``opd.self_distill``."""
    opd, dtype = cfg.opd, cfg.trainer.compute_dtype
    if opd.self_distill is not None:
        return [self_teacher(opd.self_distill, student)]
    out = []
    for spec in opd.teachers:
        own = load_tokenizer(spec.path)
        cross = own.get_vocab() != tokenizer.get_vocab()
        if cross and entry("divergence", opd.loss).takes("student_logp"):
            check_same_vocabulary(tokenizer, own, f"opd.loss={opd.loss} (over the "
                                  "vocabulary; a teacher with its own tokenizer takes a "
                                  "sampled loss: opd_sampled, opd_clip, mopd)")
        if opd.teacher_placement == "ray":
            where = {"engine": launch_engines(
                cfg.dist.model_copy(update={"engines": 1}), Path(spec.path), dtype,
                own.pad_token_id, own.eos_token_id)[0]}
        else:
            where = {"model": placed(load_model(spec.path, dtype), spec.device)}
        out.append(Teacher(spec.path, domains=tuple(spec.domains), efforts=tuple(spec.efforts),
                           weight=spec.weight, tokenizer=own if cross else None, **where))
    return out
