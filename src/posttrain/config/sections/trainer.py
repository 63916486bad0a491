"""Validated settings the trainer consumes (sections of the pydantic config tree)."""

from __future__ import annotations

import os
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from posttrain.algos.registry import Facts, facts
from posttrain.config.rules import unread
from posttrain.config.section import (
    Device,
    NamedLoss,
    OptimConfig,
    Section,
    Usable,
    registered,
    unsupplied,
)

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# policy losses that select tokens by Cov_t within a micro-batch (algos/objectives/cov_losses)
COVARIANCE_LOSSES = ("clip_cov", "kl_cov")
MISMATCH_WEIGHTS = ("tis_token", "tis_seq", "mis_token", "mis_seq")
# trainer.precision -> the dtype it computes in (a torch attribute name)
COMPUTE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# what the RL update supplies the actor's policy loss, by input name (train.rl_update.rl_loss)
POLICY_LOSS_INPUTS = ("logp", "old_logp", "advantages", "mask")


def _not_an_actor_loss(loss: Facts) -> str:
    """Why ``loss`` cannot be the actor's: a policy loss of the actor takes the policy's
    log-probs (value_clip and entropy_bonus are terms of other losses) and nothing the update
    does not supply."""
    if not loss.takes("logp"):
        return "it does not take logp, the policy's log-probs"
    return unsupplied(loss, POLICY_LOSS_INPUTS, "the RL update")


ACTOR_LOSSES = Usable("policy_loss", _not_an_actor_loss)


class PolicyLossConfig(NamedLoss):
    """A policy loss (a built-in, or a function of yours by dotted path: docs/extending.md)
    and its hyperparameters. The clip family's ``eps_low``, ``eps_high`` and ``dual_clip`` are
    range-checked fields; any other hyperparameter of the chosen loss is an extra key
    (``actor.policy_loss.r_max=5``)."""

    KIND: ClassVar[str] = "policy_loss"
    LABEL: ClassVar[str] = "policy loss"
    INPUTS: ClassVar[tuple[str, ...]] = POLICY_LOSS_INPUTS
    name: Annotated[str, registered("policy_loss", ACTOR_LOSSES)] = Field(
        "ppo_clip",
        description="the policy loss (ppo_clip, gspo, cispo, ..., or a dotted path); its other "
                    "hyperparameters are keys")
    eps_low: float | None = Field(
        None, ge=0, lt=1,
        description="the clip range below the ratio 1, in [0, 1) (null: the loss's default)")
    eps_high: float | None = Field(
        None, ge=0, description="the clip range above the ratio 1 (null: the loss's default)")
    dual_clip: float | None = Field(
        None, gt=1, description="dual-clip bound on negative advantages' ratio, > 1 (null: off)")


class KLConfig(Section):
    """KL to the frozen reference (docs/algorithms.md). ``in_loss``: ``L += coef agg(KL_t)`` on
    the current log-probs; ``in_reward``: ``R_i -= coef sum_t KL_t`` on the old log-probs before
    advantages. ``coef > 0`` loads the reference model. ``adaptive``: after each step the
    coefficient halves or doubles to keep the measured KL near ``target``."""

    estimator: Annotated[str, registered("kl")] = Field(
        "k3", description="the KL estimator: k1, k2, k3, is_k3")
    coef: float = Field(0.0, ge=0,
                        description="the KL coefficient (0: no KL term, no reference model)")
    placement: Literal["in_loss", "in_reward"] = Field(
        "in_loss",
        description="in_loss (added to the loss) or in_reward (subtracted from the reward)")
    controller: Literal["fixed", "adaptive"] = Field(
        "fixed", description="fixed coefficient, or adaptive (steers the measured KL to target)")
    target: float | None = Field(None, gt=0, description="the KL the adaptive controller aims at")

    def check(self, cfg) -> None:
        if self.coef == 0:
            unread(self, "algo.kl", ["estimator", "placement", "controller", "target"],
                   "algo.kl.coef is 0: no KL term, no reference model")

    @model_validator(mode="after")
    def _is_k3_in_loss(self) -> KLConfig:
        if (self.controller == "adaptive") != (self.target is not None):
            raise ValueError("kl.controller=adaptive and kl.target go together (the adaptive "
                             "controller steers the measured KL towards target)")
        if self.estimator == "is_k3" and self.placement != "in_loss":
            raise ValueError("kl estimator is_k3 corrects the loss for off-policy samples; "
                             "use placement in_loss")
        return self


def _default_bounds(correction: str) -> tuple[float, float]:
    return tuple(facts("offpolicy", correction).defaults().values())  # type: ignore[return-value]


class OffPolicyConfig(Section):
    """Train/inference mismatch correction (docs/algorithms.md): ``correction`` weights the
    per-token loss by ``tis_*``/``mis_*`` of ``old - behaviour`` log-probs within ``bounds``
    (``(C_min, C_max)`` or ``(C_lo, C_hi)``; left null, the function's defaults, filled in so
    the saved config shows them); ``opsm_delta`` drops negative-advantage sequences that drifted
    more than it; ``m2po_tau`` masks the tokens of largest squared log-ratio until the rest's
    second moment is below it (M2PO; 0.04 in its paper); ``kpop_phi`` masks the tokens whose
    two-way Bernoulli KL exceeds it (KPop). Bounds the user set (``model_fields_set``) are
    kept; unset or null ones follow ``correction``."""

    correction: Annotated[str, registered("offpolicy", MISMATCH_WEIGHTS)] | None = Field(
        None,
        description="importance weight on old - behaviour log-probs: tis_token, tis_seq, "
                    "mis_token, mis_seq (null: none)")
    bounds: tuple[float, float] | None = Field(
        None, description="the correction's truncation or mask bounds (null: its defaults)")
    opsm_delta: float | None = Field(
        None, ge=0,
        description="drop negative-advantage sequences that drifted more than this (null: off)")
    m2po_tau: float | None = Field(
        None, gt=0,
        description="mask the most drifted tokens until the second moment is below this (null: "
                    "off)")
    kpop_phi: float | None = Field(
        None, gt=0, description="mask tokens whose two-way Bernoulli KL exceeds this (null: off)")

    @model_validator(mode="after")
    def _bounds(self) -> OffPolicyConfig:
        if "bounds" not in self.model_fields_set or self.bounds is None:
            self.__dict__["bounds"] = None if self.correction is None \
                else _default_bounds(self.correction)
        elif self.correction is None:
            raise ValueError("offpolicy.bounds is set but offpolicy.correction is null")
        elif not 0 <= self.bounds[0] < self.bounds[1]:
            raise ValueError(f"offpolicy.bounds must satisfy 0 <= low < high, got {self.bounds}")
        return self

    def weight_options(self) -> dict[str, float]:
        """The correction's bounds by its parameter names."""
        return dict(zip(facts("offpolicy", self.correction).defaults(), self.bounds))


class EntropyBonusConfig(Section):
    """``L -= alpha agg(H)``: a fixed ``coef``, or ``adaptive`` (Skywork-OR1): alpha rises by
    ``delta`` on each step whose previous-step entropy was below ``target``."""

    coef: float = Field(0.0, ge=0,
                        description="the fixed entropy-bonus coefficient alpha (0: none)")
    adaptive: bool = Field(
        False,
        description="raise alpha by delta on each step whose previous entropy was below target")
    target: float = Field(0.2, gt=0, description="the entropy below which the adaptive bonus rises")
    delta: float = Field(0.005, gt=0, description="the adaptive bonus's increase a step")

    def check(self, cfg) -> None:
        if self.adaptive:
            unread(self, "actor.entropy_bonus", ["coef"], "actor.entropy_bonus.adaptive is "
                   "true: the controller sets the coefficient (from 0)")
        else:
            unread(self, "actor.entropy_bonus", ["target", "delta"],
                   "they steer the adaptive coefficient; actor.entropy_bonus.adaptive is false")


class ActorConfig(Section):
    """How the policy's loss is built from a batch with advantages (docs/algorithms.md).
    ``router_aux_coef`` (mixture-of-experts models): that many times the Switch Transformer
    load-balancing loss of the routers over the step's tokens is added."""

    policy_loss: PolicyLossConfig = Field(PolicyLossConfig(),
                                          description="the policy loss and its hyperparameters")
    loss_agg_mode: Annotated[str, registered("aggregation")] = Field(
        "token_mean",
        description="how token losses aggregate: token_mean, seq_mean_token_mean, ...")
    entropy_bonus: EntropyBonusConfig = Field(
        EntropyBonusConfig(), description="an entropy bonus subtracted from the loss")
    router_aux_coef: float = Field(
        0.0, ge=0,
        description="times the routers' load-balancing loss added (mixture-of-experts models)")

    def check(self, cfg) -> None:
        """What the covariance losses need of the update: ``kl_cov``'s penalty ``|log pi -
        log pi_old|`` is 0 with zero gradient on a batch's only optimiser step (the policy is
        still the rollout policy), and ``Cov_t`` is taken within a micro-batch, so one
        sequence a micro-batch under an episode-level advantage (the same on every token)
        makes every covariance 0."""
        name = self.policy_loss.name
        if "rl" not in cfg.stages or name not in COVARIANCE_LOSSES:
            return
        if name == "kl_cov" and cfg.rl.epochs * cfg.rl.mini_batches == 1:
            raise ValueError("actor.policy_loss kl_cov penalises |log pi - log pi_old|, which is "
                             "0 with zero gradient on a batch's only optimiser step: with "
                             "rl.epochs 1 and rl.mini_batches 1 it trains exactly as ppo_clip; "
                             "raise rl.epochs or rl.mini_batches, or use clip_cov")
        if cfg.trainer.micro_batch_size == 1 and \
                facts("advantage", cfg.algo.adv_estimator).output == "episode":
            raise ValueError(f"actor.policy_loss {name} selects tokens by their covariance "
                             f"within a micro-batch; with trainer.micro_batch_size 1 and "
                             f"{cfg.algo.adv_estimator}'s one advantage a sequence every "
                             "covariance is 0: raise trainer.micro_batch_size")

    @model_validator(mode="after")
    def _gspo_aggregation(self) -> ActorConfig:
        if self.policy_loss.name == "gspo" and self.loss_agg_mode != "seq_mean_token_mean":
            raise ValueError("policy loss gspo is defined with loss_agg_mode=seq_mean_token_mean, "
                             f"not {self.loss_agg_mode}")
        return self


class CriticConfig(Section):
    """PPO's value model (``algo.adv_estimator=gae``): the policy's backbone with a fresh scalar
    head, trained on GAE returns with ``value_clip`` and its own optimiser."""

    enabled: bool = Field(False, description="train a value model (with algo.adv_estimator=gae)")
    cliprange_value: float = Field(0.2, gt=0,
                                   description="the value clip range of the critic's loss")
    optim: OptimConfig = Field(OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant"),
                               description="the critic's optimiser and learning-rate schedule")

    def check(self, cfg) -> None:
        if not self.enabled:
            unread(self, "critic", ["cliprange_value", "optim"],
                   "critic.enabled is false (no value model)")


class MTPConfig(Section):
    """``trainer.mtp``: a multi-token-prediction head (``models.mtp.MTPHead``) learns
    ``mtp_self_distill`` on every optimiser step's batch, after the step, with its own AdamW
    (``lr``, ``weight_decay``); the model gets no gradient from it. Saved beside each stage's
    model and in checkpoints; speculative decoding drafts with it (``engine.draft_tokens``)."""

    lr: float = Field(1e-3, gt=0, le=1, description="the MTP head's AdamW learning rate, in (0, 1]")
    weight_decay: float = Field(0.0, ge=0, description="the MTP head's AdamW weight decay")


class LoraConfig(Section):
    """LoRA adapters (through ``peft``) of rank ``r`` and scale ``alpha / r`` on the
    ``target_modules`` linear layers; the base weights stay frozen."""

    r: int = Field(8, ge=1, description="the adapters' rank")
    alpha: float = Field(16.0, gt=0, description="the adapters' scale is alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input, in [0, 1)")
    target_modules: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1,
                                      description="the linear layers that get adapters")


class TrainerConfig(Section):
    """``share_prefix``: rows of a micro-batch with the same prompt encode it once (a GRPO group
    of ``G`` samples does ``1/G`` of the prompt work); same values and gradients. ``shard``:
    in a process group of several trainers (``dist.trainer_processes``), shard parameters,
    gradients and optimiser state with FSDP2 instead of replicating them; ``offload`` (with
    ``shard``) keeps those shards in CPU memory, copies each layer's to the device around its
    forward and backward, and runs the optimiser step on the CPU (FSDP2's CPU offload: device
    memory for activations and one layer at a time, at the cost of host-device copies).
    ``gradient_checkpointing``: keep only each decoder layer's input and recompute the layer
    in the backward pass (less activation memory, one more forward; same gradients). ``lora``
    (null: full fine-tuning): train adapters only; engines, checkpoints and saved models get
    the merged weights. ``precision``: the compute dtype (``fp32``; ``bf16``, ``fp16`` (CUDA,
    with loss scaling): autocast over fp32 master weights and optimiser state, log-softmax and
    losses in fp32); frozen models (reference, teachers, judges) and the engine hold their
    weights in it (``compute_dtype``). ``device``: where the policy, its reference and the
    critic train (``auto``: the first CUDA device if any, else the CPU; ``cpu``, ``cuda``,
    ``cuda:N``). ``routing_replay`` (mixture-of-experts models, the torch engine): the engine
    records the experts of every token it processes and the trainer scores each token through
    them (R3), so a near tie that rounding tips differently does not move a log-prob."""

    device: Device = Field(
        "auto", description="where the policy, reference and critic train: auto, cpu, cuda, cuda:N")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="the compute dtype: fp32, bf16, fp16 (CUDA; fp32 master weights)")
    routing_replay: bool = Field(
        False, description="score each token through the experts the engine routed it to (MoE)")
    micro_batch_size: int = Field(
        64, ge=1,
        description="rows a forward and backward pass; gradients accumulate over micro-batches")
    logprob_chunk_size: int = Field(
        1024, ge=1, description="token positions projected to the vocabulary at a time")
    max_bad_steps: int = Field(
        3, ge=0, description="non-finite steps in a row that are skipped before the run stops")
    share_prefix: bool = Field(True,
                               description="encode a prompt shared by rows of a micro-batch once")
    shard: bool = Field(
        False,
        description="shard parameters, gradients and optimiser state with FSDP2 over trainer "
                    "processes")
    offload: bool = Field(
        False,
        description="keep the shards in CPU memory and step the optimiser there (with shard)")
    gradient_checkpointing: bool = Field(
        False, description="recompute each decoder layer in the backward pass (less memory)")
    lora: LoraConfig | None = Field(None,
                                    description="train LoRA adapters only (null: full fine-tuning)")
    mtp: MTPConfig | None = Field(
        None, description="a multi-token-prediction head learning beside the model (null: none)")

    @property
    def compute_dtype(self) -> str:
        """The dtype name (``load_model``'s) that ``precision`` computes in."""
        return COMPUTE_DTYPES[self.precision]

    @model_validator(mode="after")
    def _offload_needs_shard(self) -> TrainerConfig:
        if self.offload and not self.shard:
            raise ValueError("trainer.offload moves FSDP2's shards to CPU memory: it needs "
                             "trainer.shard=true")
        return self

    def check(self, cfg) -> None:
        """The trainer's layout with the cluster, the critic and the checkpoints."""
        if "rl" in cfg.stages and self.shard and cfg.critic.enabled:
            raise ValueError("trainer.shard does not shard the critic: use replicated trainer "
                             "processes (trainer.shard=false) with critic.enabled")
        if self.lora is not None and self.shard:
            raise ValueError("trainer.lora trains replicated adapters: set trainer.shard=false "
                             "(the frozen base is not sharded)")
        if self.lora is not None and cfg.checkpoint_format == "sharded":
            raise ValueError("checkpoint_format=sharded saves sharded weights; trainer.lora "
                             "checkpoints its adapter: use checkpoint_format=whole")
        if self.mtp is not None:
            blocked = {"trainer.shard": self.shard, "trainer.lora": self.lora is not None,
                       "dist.trainer_processes > 1": cfg.dist.trainer_processes > 1,
                       "dist.trainer_actor": cfg.dist.trainer_actor,
                       "sft.pack_tokens": "sft" in cfg.stages and cfg.sft.pack_tokens}
            named = [k for k, on in blocked.items() if on]
            if named:
                raise ValueError(f"trainer.mtp trains its head in one process on whole, "
                                 f"unpacked rows: not with {', '.join(named)}")
        launched = int(os.environ.get("WORLD_SIZE", "1")) > 1  # started by torchrun
        if self.shard and cfg.dist.trainer_processes == 1 and not launched:
            raise ValueError("trainer.shard shards over dist.trainer_processes (or the "
                             "processes torchrun starts); there is one")

    @model_validator(mode="after")
    def _prefix_or_checkpointing(self) -> TrainerConfig:
        if self.share_prefix and self.gradient_checkpointing:
            raise ValueError("trainer.gradient_checkpointing recomputes every layer in the "
                             "backward pass, where a shared prefix's cache does not exist: set "
                             "trainer.share_prefix=false with it")
        return self
