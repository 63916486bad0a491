"""Validated settings the trainer consumes (sections of the pydantic config tree)."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from posttrain.algos import canonical, entry, get, names

# advantage estimators the synchronous RL pipeline can feed (rewards, group ids, mask); the
# others need a critic, multi-part rewards or episode structure and are wired elsewhere
OUTCOME_ESTIMATORS = ("grpo", "dr_grpo", "mean_baseline", "rloo", "reinforce_plus_plus_baseline")
# policy losses of the actor (those of log-probs; value_clip and entropy_bonus are terms)
ACTOR_LOSSES = tuple(
    n for n in names("policy_loss") if "logp" in inspect.signature(get("policy_loss", n)).parameters
)


def registered(kind: str, allowed: tuple[str, ...] | None = None) -> AfterValidator:
    """Field annotation: the value names a ``kind`` entry of the catalogue (an alias is
    replaced by its canonical name); with ``allowed``, one of those."""

    def check(name: str) -> str:
        try:
            name = canonical(kind, name)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        if allowed is not None and name not in allowed:
            raise ValueError(f"{kind} {name!r} cannot be used here; use one of: "
                             f"{', '.join(allowed)}")
        return name

    return AfterValidator(check)


class Section(BaseModel):
    """Base of every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class OptimConfig(Section):
    """AdamW with linear warmup then cosine decay to ``min_lr_ratio * lr``."""

    lr: float = Field(1e-3, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    grad_clip: float | None = Field(1.0, gt=0)

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):
            raise ValueError("each beta must be in [0, 1)")
        return v


class PolicyLossConfig(Section):
    """A policy loss and its hyperparameters. The clip family's ``eps_low``, ``eps_high`` and
    ``dual_clip`` are range-checked fields; any other hyperparameter of the chosen loss is an
    extra key (``rl.loss.policy_loss.r_max=5``). Null means the loss's own default; a value the
    loss does not take, or a missing required one, is an error."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: Annotated[str, registered("policy_loss", ACTOR_LOSSES)] = "ppo_clip"
    eps_low: float | None = Field(None, ge=0, lt=1)
    eps_high: float | None = Field(None, ge=0)
    dual_clip: float | None = Field(None, gt=1)

    def hyperparameters(self) -> dict[str, Any]:
        """The keyword arguments to pass: every non-null value except ``name``."""
        values = {**self.__dict__, **(self.model_extra or {})}
        return {k: v for k, v in values.items() if k != "name" and v is not None}

    @model_validator(mode="after")
    def _takes_effect(self) -> PolicyLossConfig:
        accepted = entry("policy_loss", self.name).hyperparameters()
        given = self.hyperparameters()
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise ValueError(f"policy loss {self.name!r} does not take {', '.join(unknown)}; "
                             f"it takes: {', '.join(accepted) or 'nothing'}")
        missing = sorted(k for k, required in accepted.items() if required and k not in given)
        if missing:
            raise ValueError(f"policy loss {self.name!r} needs {', '.join(missing)}")
        return self


class KLConfig(Section):
    """KL to the frozen reference, added to the loss: ``L += coef * agg(KL_t)``."""

    estimator: Annotated[str, registered("kl")] = "k3"
    coef: float = Field(0.0, ge=0)
    placement: Literal["in_loss"] = "in_loss"


class LossConfig(Section):
    """How a batch of rollouts becomes a loss (ALGORITHMS.md §1-4)."""

    adv_estimator: Annotated[str, registered("advantage", OUTCOME_ESTIMATORS)] = "grpo"
    policy_loss: PolicyLossConfig = PolicyLossConfig()
    loss_agg_mode: Annotated[str, registered("aggregation")] = "token_mean"
    kl: KLConfig = KLConfig()
    entropy_coef: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _gspo_aggregation(self) -> LossConfig:
        if self.policy_loss.name == "gspo" and self.loss_agg_mode != "seq_mean_token_mean":
            raise ValueError("policy loss gspo is defined with loss_agg_mode=seq_mean_token_mean, "
                             f"not {self.loss_agg_mode}")
        return self


class TrainerConfig(Section):
    """``share_prefix``: rows of a micro-batch with the same prompt encode it once (a GRPO group
    of ``G`` samples does ``1/G`` of the prompt work); same values and gradients."""

    micro_batch_size: int = Field(64, ge=1)
    logprob_chunk_size: int = Field(1024, ge=1)
    max_bad_steps: int = Field(3, ge=0)
    share_prefix: bool = True
