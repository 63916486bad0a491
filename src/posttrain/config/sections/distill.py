"""Validated settings of distillation (docs/distillation.md): offline knowledge distillation
(``distill`` stage) and on-policy distillation (``opd`` stage)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from posttrain.algos.registry import facts
from posttrain.config.rules import applies, unread
from posttrain.config.section import (
    Count,
    Device,
    Every,
    NamedLoss,
    OptimConfig,
    SampledStageConfig,
    Section,
    StageConfig,
    Steps,
    registered,
)

OFFLINE_DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "skew_fkl", "skew_rkl", "tvd", "uld")
OPD_LOSSES = ("full_vocab_rkl", "opd_sampled", "opd_clip", "mopd")
SELF_DISTILL = ("sdft", "sdpo", "opsd")


class TeacherConfig(Section):
    """One teacher: a local HF model directory, the task ``domains`` and effort levels it
    scores (empty: all), its ``weight`` among the teachers a sample is routed to, and the
    ``device`` it runs on in-process (``auto``: the first CUDA device if any, else the CPU)."""

    path: str = Field(description="the teacher: a local Hugging Face model directory")
    device: Device = Field("auto",
                           description="where the teacher runs in-process: auto, cpu, cuda, cuda:N")
    domains: list[str] = Field(default_factory=list,
                               description="the task domains it scores (empty: all)")
    efforts: list[int] = Field(default_factory=list,
                               description="the effort levels it scores (empty: all)")
    weight: float = Field(1.0, gt=0,
                          description="its weight among the teachers a sample is routed to")


class OPDConfig(SampledStageConfig):
    """On-policy distillation: the student samples ``group_size`` completions for each of
    ``prompts_per_step`` prompts, the teachers score the student's tokens and the student
    moves toward them.

    ``loss``: ``full_vocab_rkl`` (DeepSeek V4: the exact reverse KL over the vocabulary, or
    the student's ``topk`` tokens plus a tail bucket) or a per-token advantage trained with the
    ``actor`` section's policy loss: ``opd_sampled`` (``A_t = logp_T - logp``), ``opd_clip``
    (clipped to ``[-r_max, r_max]``, Kimi K3) or ``mopd`` (plus ``alpha`` times the outcome
    advantage, MiMo). ``teachers`` run in-process, or as Ray engine actors
    (``teacher_placement: ray``, with ``dist.backend: ray``; sampled losses only, since an
    engine returns the sampled tokens' log-probs). ``self_distill`` (``sdft``, ``sdpo``,
    ``opsd``) makes the student its own teacher given privileged context instead."""

    group_size: Count = Field(4, description="student samples a prompt")
    loss: Annotated[str, registered("divergence", OPD_LOSSES)] = Field(
        "full_vocab_rkl",
        description="full_vocab_rkl, or with the actor's policy loss opd_sampled, opd_clip, mopd")
    topk: int | None = Field(
        None, ge=1,
        description="full_vocab_rkl over the student's top-k tokens plus a tail bucket (null: the "
                    "vocabulary)")
    r_max: float = Field(1.0, gt=0, description="opd_clip's advantage clip [-r_max, r_max]")
    alpha: float = Field(0.5, ge=0, description="mopd's weight of the outcome advantage")
    teachers: list[TeacherConfig] = Field(
        default_factory=list, description="the teachers: path, device, domains, efforts, weight")
    teacher_placement: Literal["local", "ray"] = Field(
        "local", description="teachers in-process (local) or as Ray engine actors (ray)")
    self_distill: Literal[SELF_DISTILL] | None = Field(
        None,
        description="the student as its own teacher with privileged context: sdft, sdpo, opsd")
    eval_every: Every = Field(
        25, description="held-out evaluation every this many steps and after the last (0: never)")
    optim: OptimConfig = Field(OptimConfig(lr=1e-4, warmup_steps=5),
                               description="the student's optimiser and learning-rate schedule")

    @model_validator(mode="after")
    def _consistent(self) -> OPDConfig:
        if self.self_distill is not None and self.teachers:
            raise ValueError("opd.self_distill uses the student as its own teacher: leave "
                             "opd.teachers empty")
        if self.topk is not None and self.loss != "full_vocab_rkl":
            raise ValueError(f"opd.topk applies to full_vocab_rkl, not {self.loss}")
        if self.teacher_placement == "ray" and self.loss == "full_vocab_rkl":
            raise ValueError("opd.teacher_placement=ray serves sampled-token log-probs only: "
                             "use loss opd_sampled, opd_clip or mopd, or local teachers")
        return self

    def check(self, cfg) -> None:
        """The stage's teachers, task, loss and placement."""
        if "opd" not in cfg.stages:
            return
        if not self.teachers and self.self_distill is None:
            raise ValueError("the opd stage needs opd.teachers or opd.self_distill")
        if not cfg.single_turn:
            raise ValueError(f"on-policy distillation samples single-turn answers; task.name="
                             f"{cfg.task.name} is an agent task")
        if self.loss == "mopd" and self.group_size < 2:
            raise ValueError("opd.loss=mopd adds the outcome advantage of a group: it needs "
                             "opd.group_size >= 2")
        if self.teacher_placement == "ray" and cfg.dist.backend != "ray":
            raise ValueError("opd.teacher_placement=ray needs dist.backend=ray")
        if cfg.dist.trainer_processes > 1:
            raise ValueError("the opd stage runs in one trainer process (dist.trainer_processes=1)")
        takers = {key: tuple(loss for loss in OPD_LOSSES if key in opd_inputs(loss))
                  for key in ("r_max", "alpha")}
        applies(self, "opd", takers, self.loss, "opd.loss")
        if "student_logp" in opd_inputs(self.loss) and "rl" not in cfg.stages:
            unread(cfg.actor, "actor", None,
                   f"opd.loss={self.loss} matches the teachers' distributions directly (only "
                   "opd_sampled, opd_clip and mopd train with the actor's policy loss) and "
                   f"'rl' is not in stages {cfg.stages}")


def opd_inputs(loss: str) -> tuple[str, ...]:
    """What OPD loss ``loss`` takes: the student's distributions (``student_logp``) or the
    sampled tokens' log-probs, and its options (``r_max``, ``alpha``, ``topk``)."""
    return facts("divergence", loss).parameter_names()


class DivergenceConfig(NamedLoss):
    """A divergence of offline distillation with its hyperparameters as keys
    (``distill.divergence.beta=0.9`` for ``jsd``)."""

    KIND: ClassVar[str] = "divergence"
    LABEL: ClassVar[str] = "divergence"
    name: Annotated[str, registered("divergence", OFFLINE_DIVERGENCES)] = Field(
        "forward_kl",
        description="the divergence: forward_kl, reverse_kl, jsd, skew_fkl, skew_rkl, tvd, uld")


class DistillConfig(StageConfig):
    """Offline knowledge distillation on chat data: ``data`` (conversations, as ``sft.data``
    rows) or, when null, ``num_examples`` worked solutions generated from the task. Targets
    come from a live ``teacher`` (a model directory) or stored ``logits`` (a file written by
    ``posttrain teacher-logits`` for this data): exactly one. ``lam`` > 0 (GKD, live teacher
    only) replaces each conversation with that probability by the student's own answer of up
    to ``max_new_tokens``. The live teacher runs on ``teacher_device``. ``ce_weight`` adds
    that many times the tokens' own negative log-likelihood (SFT's loss; ULD's paper pairs
    ``uld`` with it)."""

    steps: Steps = Field(200, description="optimiser steps of offline distillation")
    batch_size: Count = Field(32, description="conversations a step")
    data: str | None = Field(
        None,
        description="a conversation dataset, as sft.data (null: worked solutions generated from "
                    "the task)")
    num_examples: Count = Field(5000,
                                description="conversations generated from the task (data null)")
    teacher: str | None = Field(None,
                                description="a live teacher's model directory (or set logits)")
    teacher_device: Device = Field(
        "auto", description="where the live teacher runs: auto, cpu, cuda, cuda:N")
    logits: str | None = Field(
        None, description="stored teacher logits from posttrain teacher-logits (or set teacher)")
    divergence: DivergenceConfig = Field(
        DivergenceConfig(), description="the divergence to the teacher and its hyperparameters")
    lam: float = Field(
        0.0, ge=0, le=1,
        description="GKD: probability a conversation is replaced by the student's own answer, in "
                    "[0, 1]")
    max_new_tokens: Count = Field(32, description="most tokens of a GKD student answer")
    ce_weight: float = Field(
        0.0, ge=0, description="times the tokens' own negative log-likelihood added to the loss")
    optim: OptimConfig = Field(OptimConfig(lr=1e-3, warmup_steps=10),
                               description="the student's optimiser and learning-rate schedule")

    @model_validator(mode="after")
    def _gkd_needs_a_live_teacher(self) -> DistillConfig:
        if self.lam > 0 and self.ce_weight > 0:
            raise ValueError("distill.ce_weight is the data's own log-likelihood, and with "
                             "distill.lam > 0 part of each batch is the student's samples: "
                             "set one of them")
        if self.lam > 0 and self.logits is not None:
            raise ValueError("distill.lam > 0 scores the student's own samples: it needs a "
                             "live distill.teacher, not stored logits")
        return self

    def check(self, cfg) -> None:
        if "distill" in cfg.stages and (self.teacher is None) == (self.logits is None):
            raise ValueError("the distill stage needs exactly one of distill.teacher (a model "
                             "directory) and distill.logits (stored teacher logits)")
        if self.data is not None:
            unread(self, "distill", ["num_examples"], "the data generated from the task is not "
                   "used: distill.data is set")
        if self.lam == 0:
            unread(self, "distill", ["max_new_tokens"],
                   "it bounds GKD's student samples, and distill.lam is 0 (none are drawn)")
