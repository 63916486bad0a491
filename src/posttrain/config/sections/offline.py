"""Settings of the stages that learn from a fixed dataset: SFT, preference optimisation and
reward models."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from posttrain.algos.registry import facts
from posttrain.config.rules import unread
from posttrain.config.section import (
    BatchStageConfig,
    Count,
    Every,
    NamedLoss,
    OptimConfig,
    Section,
    Steps,
    registered,
)

GIVEN = "the data generated from the task is not used: {}.data is set"


class SFTConfig(BatchStageConfig):
    """Supervised fine-tuning on chat data (``data``: conversations in OpenAI, ShareGPT or TRL
    form, any file ``datasets`` reads, docs/datasets.md; or generated from the task with
    ``error_rate`` of flawed answers when ``data`` is null).
    ``pack_tokens``: each step's conversations packed into rows of at most that many tokens,
    attention isolated between them (same loss and gradients as unpacked; null: one a row).
    ``confessions``: the share of generated conversations that end with a confession turn
    (``reward.confession``'s prompt, then "My answer is correct." or "... wrong.", drawn at
    random), so a small model learns the confession's form, and nothing of its honesty,
    before RL trains that. ``gradings``: the share of generated conversations turned into
    ``rl.actor_as_grm``'s grading prompt for their answer, graded 0 or ``score_max`` at
    random (the form again, not the judgement)."""

    steps: Steps = Field(500, description="optimiser steps of supervised fine-tuning")
    batch_size: Count = Field(64, description="conversations a step")
    data: str | None = Field(
        None,
        description="conversations: any file datasets reads (null: generated from the task)")
    num_examples: Count = Field(20000,
                                description="conversations generated from the task (data null)")
    error_rate: float = Field(0.6, ge=0, le=1,
                              description="share of generated answers that are flawed, in [0, 1]")
    optim: OptimConfig = Field(OptimConfig(lr=3e-3, warmup_steps=30),
                               description="the stage's optimiser and learning-rate schedule")
    pack_tokens: int | None = Field(
        None, ge=2,
        description="pack a step's conversations into rows of at most this many tokens (null: one "
                    "a row)")
    confessions: float = Field(
        0.0, ge=0, le=1,
        description="share of generated conversations that end with a confession turn")
    gradings: float = Field(
        0.0, ge=0, le=1,
        description="share of generated conversations that become a grading prompt")

    def check(self, cfg) -> None:
        if self.data is not None:
            unread(self, "sft", ["num_examples", "error_rate", "confessions", "gradings"],
                   GIVEN.format("sft"))
        if self.confessions and cfg.reward.confession is None:
            raise ValueError("sft.confessions ends generated conversations with a confession "
                             "after reward.confession's prompt: set reward.confession")
        if self.gradings and cfg.rl.actor_as_grm is None:
            raise ValueError("sft.gradings turns generated conversations into "
                             "rl.actor_as_grm's grading prompts: set rl.actor_as_grm")


# preference losses on (chosen, rejected) pairs; kto sees the pairs' responses unpaired
PREFERENCE_LOSSES = ("dpo", "ipo", "simpo", "orpo", "cpo", "r_dpo", "kto")


class PreferenceLossConfig(NamedLoss):
    """A preference loss of docs/algorithms.md (``dpo``, ``ipo``, ``simpo``, ``orpo``, ``cpo``,
    ``r_dpo``, ``kto``) with its hyperparameters as keys (``pref.loss.beta=0.2``)."""

    KIND: ClassVar[str] = "preference"
    LABEL: ClassVar[str] = "preference loss"
    name: Annotated[str, registered("preference", PREFERENCE_LOSSES)] = Field(
        "dpo",
        description="the preference loss: dpo, ipo, simpo, orpo, cpo, r_dpo, kto; its "
                    "hyperparameters are keys")


class PairDataConfig(BatchStageConfig):
    """Where pairs come from: ``data`` (TRL's pair forms, any file ``datasets`` reads; its
    last ``eval_pairs`` rows, at most a tenth, held out) or, when null, ``num_pairs``
    generated from the task (the worked solution over the flawed one) and ``eval_pairs`` from
    its held-out split."""

    KEY: ClassVar[str]  # the section's name in the config
    data: str | None = Field(
        None,
        description="a preference-pair dataset in TRL's forms (null: pairs generated from the "
                    "task)")
    num_pairs: Count = Field(4000, description="pairs generated from the task (data null)")
    eval_pairs: Count = Field(
        200, description="held-out pairs (of data: its last rows, at most a tenth)")
    steps: Steps = Field(200, description="optimiser steps of the stage")
    eval_every: Every = Field(
        50, description="held-out accuracy every this many steps and after the last (0: never)")

    def check(self, cfg) -> None:
        if self.data is not None:
            unread(self, self.KEY, ["num_pairs"], GIVEN.format(self.KEY))


class PreferenceConfig(PairDataConfig):
    """Preference optimisation on pairs: ``batch_size`` pairs a step. Losses with a reference
    take its log-probs ``precompute``d once for the data or computed ``on_the_fly`` each step
    (same numbers). The held-out pairs measure the implicit reward's accuracy every
    ``eval_every`` steps."""

    KEY: ClassVar[str] = "pref"
    loss: PreferenceLossConfig = Field(PreferenceLossConfig(),
                                       description="the preference loss and its hyperparameters")
    reference: Literal["precompute", "on_the_fly"] = Field(
        "precompute",
        description="the reference's log-probs: precompute once, or on_the_fly each step")
    optim: OptimConfig = Field(OptimConfig(lr=1e-5, warmup_steps=10),
                               description="the stage's optimiser and learning-rate schedule")

    def check(self, cfg) -> None:
        super().check(cfg)
        if "pref" in cfg.stages and self.data is None and not cfg.task.PAIRS:
            raise ValueError("pref.data is null: generated preference pairs exist for "
                             f"task.name=arithmetic, not {cfg.task.name}")
        if not any(p.startswith("ref_") for p in facts("preference", self.loss.name)
                   .parameter_names()):
            unread(self, "pref", ["reference"],
                   f"preference loss {self.loss.name} has no reference model to score with")


class PrototypesConfig(Section):
    """P-GenRM's prototype module (``rm.loss: pgenrm_pair``, arXiv 2602.12116): ``count``
    prototypes, each user's ``history`` (their first train pairs, repeated when they have
    fewer), the pulls ``lam_cent`` and ``lam_tr`` and the weights ``lam_q``, ``lam_s``,
    ``rho`` of ``z_t = a_j + lam_q W_q q_t + lam_s W_s v_H``."""

    count: Count = Field(4, description="P-GenRM's prototypes")
    history: Count = Field(8, description="a user's first train pairs that make up their history")
    lam_cent: float = Field(5.0, ge=0,
                            description="weight of the pull of users towards their prototype")
    lam_tr: float = Field(5.0, ge=0,
                          description="weight of the pull of prototypes towards their users")
    lam_q: float = Field(1.0, ge=0, description="weight of the query term lam_q W_q q_t")
    lam_s: float = Field(1.0, ge=0, description="weight of the history term lam_s W_s v_H")
    rho: float = Field(1.0, ge=0, description="weight rho of the prototype loss")


class RewardModelConfig(PairDataConfig):
    """Reward-model training (``posttrain reward-model``): ``loss`` ``bradley_terry`` (a score
    per response), ``pairwise_classifier`` (a score per comparison of two answers) or
    ``pgenrm_pair`` (P-GenRM's user prototypes over the frozen backbone's text embeddings,
    ``prototypes``; rows of ``data`` name their ``user``); ``steps`` of ``batch_size`` pairs;
    held-out accuracy every ``eval_every`` steps."""

    KEY: ClassVar[str] = "rm"
    loss: Literal["bradley_terry", "pairwise_classifier", "pgenrm_pair"] = Field(
        "bradley_terry",
        description="bradley_terry, pairwise_classifier, or pgenrm_pair (P-GenRM's user "
                    "prototypes)")
    optim: OptimConfig = Field(
        OptimConfig(lr=1e-4, warmup_steps=10),
        description="the reward model's optimiser and learning-rate schedule")
    prototypes: PrototypesConfig = Field(
        PrototypesConfig(), description="P-GenRM's prototype module (rm.loss=pgenrm_pair)")

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.loss != "pgenrm_pair":
            unread(self, "rm", ["prototypes"], "only rm.loss=pgenrm_pair trains prototypes")
        elif self.data is None:
            raise ValueError("rm.loss=pgenrm_pair learns each user's preference: set rm.data "
                             "to pairs whose rows name their user (generated pairs have none)")
