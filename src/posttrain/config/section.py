"""The base of every config section, catalogue-name validation and the optimiser section."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from posttrain.algos.registry import Facts, canonical, facts, names
from posttrain.types import SamplingParams

# field types of the shared sections (a stage declares only its own defaults)
Steps = Annotated[int, Field(ge=0)]
Every = Annotated[int, Field(ge=0)]  # do something every this many steps; 0: never
Count = Annotated[int, Field(ge=1)]


@dataclasses.dataclass(frozen=True)
class Usable:
    """The entries of ``kind`` a key accepts: those whose ``Facts`` ``refusal`` finds nothing
    against (it says why an entry cannot be used there, or returns ""). Read when asked, so a
    function named by dotted path is judged by what it declares, as a built-in is."""

    kind: str
    refusal: Callable[[Facts], str]

    def why_not(self, name: str) -> str:
        return self.refusal(facts(self.kind, name))

    def __contains__(self, name: str) -> bool:
        return not self.why_not(name)

    def __iter__(self) -> Iterator[str]:
        return (n for n in names(self.kind) if n in self)


def unsupplied(entry: Facts, supplied: tuple[str, ...], caller: str) -> str:
    """Why ``entry`` cannot be called by ``caller``, which supplies the inputs ``supplied``:
    the inputs it requires that are not among them (or "")."""
    missing = entry.unsupplied(supplied)
    return f"it takes {', '.join(missing)}, which {caller} does not supply (it supplies " \
           f"{', '.join(supplied)})" if missing else ""


def registered(kind: str, allowed: Collection[str] | None = None) -> AfterValidator:
    """Field annotation: the value names a ``kind`` entry of the catalogue (an alias is
    replaced by its canonical name) or a function by dotted path; with ``allowed`` (a tuple,
    or ``Usable``: the error then says why), one of those."""

    def check(name: str) -> str:
        try:
            name = canonical(kind, name)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        if allowed is not None and name not in allowed:
            why = f" ({allowed.why_not(name)})" if isinstance(allowed, Usable) else ""
            raise ValueError(f"{kind} {name!r} cannot be used here{why}; use one of: "
                             f"{', '.join(allowed)}")
        return name

    check.kind, check.allowed = kind, allowed  # read by config.reach
    return AfterValidator(check)


def check_hyperparameters(label: str, accepted: dict[str, bool], given: set[str]) -> None:
    """``given`` keys must be among ``accepted`` (``name -> required``) and include every
    required one; the error names ``label`` (``policy loss 'cispo'``)."""
    unknown = sorted(given - set(accepted))
    if unknown:
        raise ValueError(f"{label} does not take {', '.join(unknown)}; it takes: "
                         f"{', '.join(sorted(accepted)) or 'nothing'} (the options a config "
                         "file gives another function stay when only the name is changed: "
                         "give the whole section, e.g. pref.loss='{name: ipo, tau: 0.05}')")
    missing = sorted(k for k, required in accepted.items() if required and k not in given)
    if missing:
        raise ValueError(f"{label} needs {', '.join(missing)}")


def samples_differ(samples: str, n: int, temperature: str, t: float) -> None:
    """Refuse ``n > 1`` samples (the key ``samples``) at temperature 0 (the key
    ``temperature``): greedy samples are all the same."""
    if n > 1 and t == 0:
        raise ValueError(f"{samples} > 1 needs {temperature} > 0 (greedy samples are all the "
                         "same)")


def _number_only(annotation: Any) -> bool:
    """Whether a field of this type takes numbers but not booleans."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    leaves = set(get_args(annotation)) if get_origin(annotation) in (Union, UnionType) \
        else {annotation}
    return bool(leaves & {int, float}) and bool not in leaves


def described(default: Any, description: str) -> Any:
    """The default of a dataclass field that is also a config key (``agent.compaction``'s),
    with its description, which pydantic reads as it reads ``Field(description=...)``."""
    return dataclasses.field(default=default, metadata={"description": description})


# a device key's value: auto (the first CUDA device if any, else the CPU), cpu, cuda or cuda:N
Device = Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?)$")]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, and so is ``true``/``false``
    where a number is meant (pydantic would read them as 1 and 0)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and _number_only(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"a number is expected, not {str(value).lower()}")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _partial_keeps_defaults(cls, value: Any, info: ValidationInfo) -> Any:
        """A sub-section given in part keeps this section's default for the keys not given:
        ``rl.optim.warmup_steps=2`` leaves ``rl.optim.lr`` at rl's 1e-4, not at
        ``OptimConfig``'s own 1e-3."""
        default = cls.model_fields[info.field_name].default
        if not isinstance(value, dict) or not isinstance(default, Section):
            return value
        given = default.model_dump(by_alias=True, exclude_unset=True)  # the owner's own
        for name in set(default.model_extra or {}) - default.model_fields_set:
            given.pop(name)  # an extra key filled in (a catalogue default), not set
        for name, field in type(default).model_fields.items():
            if field.alias and name in value:  # given by name: the default's alias would win
                given.pop(field.alias, None)
        return given | value

    def check(self, cfg) -> None:
        """Rules across the run's sections (``cfg``, a ``RunConfig``) that concern this
        section; a ``ValueError`` names the keys. ``RunConfig`` calls it on every section."""


class OptimConfig(Section):
    """AdamW with linear warmup then cosine decay to ``min_lr_ratio * lr``."""

    lr: float = Field(1e-3, gt=0, le=1,
                      description="peak learning rate of AdamW, reached after warmup_steps (0, 1]")
    weight_decay: float = Field(0.0, ge=0, description="AdamW's decoupled weight decay (>= 0)")
    betas: tuple[float, float] = Field((0.9, 0.999),
                                       description="AdamW's beta1 and beta2, each in [0, 1)")
    eps: float = Field(1e-8, gt=0, description="AdamW's epsilon, added to the denominator (> 0)")
    warmup_steps: int = Field(0, ge=0, description="optimiser steps of linear warmup from 0 to lr")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="after warmup: cosine (decay to min_lr_ratio * lr) or constant")
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1, description="the cosine schedule's floor, a fraction of lr in [0, 1]")
    grad_clip: float | None = Field(
        1.0, gt=0, description="clip the gradient's global norm to this (null: no clipping)")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):
            raise ValueError("each beta must be in [0, 1)")
        return v


class NamedLoss(Section):
    """A catalogue function of kind ``KIND`` chosen by ``name`` (or a function of the user's
    by dotted path), its hyperparameters as extra keys. A hyperparameter the user set
    (``model_fields_set``: given in the file, an override or an assignment, not null) is kept
    whatever the name; every other one holds the chosen function's own default, so a dumped
    config shows the value used and renaming the function moves its unset values to the new
    function's defaults. A value it does not take, or a missing required one, is an error.
    Values are never compared with defaults to guess whether they were set. Parameters its
    caller fills from ``INPUTS`` (by input name) are not hyperparameters."""

    KIND: ClassVar[str]
    LABEL: ClassVar[str]  # how errors name it: "policy loss"
    INPUTS: ClassVar[tuple[str, ...]] = ()
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v is not None or k == "name"}

    def hyperparameters(self) -> dict[str, Any]:
        """The keyword arguments to pass: every non-null value except ``name``."""
        values = {**self.__dict__, **(self.model_extra or {})}
        return {k: v for k, v in values.items() if k != "name" and v is not None}

    @model_validator(mode="after")
    def _defaults_follow_name(self) -> NamedLoss:
        try:
            chosen = facts(self.KIND, self.name)
        except KeyError:
            return self  # the name's own validator reports it
        own = chosen.defaults(self.INPUTS)
        given, extra = self.model_fields_set, self.__pydantic_extra__
        for key, field in type(self).model_fields.items():
            if key != "name" and key not in given:
                self.__dict__[key] = own.get(key, field.default)
        for key in [k for k in extra if k not in given]:
            del extra[key]
        extra.update({k: v for k, v in own.items()
                      if k not in given and k not in type(self).model_fields})
        check_hyperparameters(f"{self.LABEL} {self.name!r}", chosen.hyperparameters(self.INPUTS),
                              set(self.hyperparameters()))
        return self


class StageConfig(Section):
    """What every training stage has: ``steps`` optimiser steps with ``optim``."""

    steps: Steps = Field(100, description="optimiser steps of the stage")
    optim: OptimConfig = Field(OptimConfig(),
                               description="the stage's optimiser and learning-rate schedule")


class BatchStageConfig(StageConfig):
    """A stage on a fixed dataset: ``batch_size`` examples a step, metrics every
    ``log_every`` steps."""

    batch_size: Count = Field(32, description="examples a step (preference stages: pairs)")
    log_every: Count = Field(10,
                             description="log metrics every this many steps (and after the last)")


class SamplingConfig(Section):
    """How completions are sampled: up to ``max_new_tokens``, at ``temperature`` (0: greedy),
    truncated to the ``top_k`` most likely tokens (0: all) and the smallest set of mass
    ``top_p``."""

    max_new_tokens: Count = Field(
        32, description="most tokens sampled a completion (an agent episode: a turn)")
    temperature: float = Field(1.0, ge=0, description="sampling temperature (0: greedy)")
    top_p: float = Field(
        1.0, gt=0, le=1,
        description="nucleus sampling: the smallest set of tokens of this mass, in (0, 1] (1: all)")
    top_k: int = Field(0, ge=0, description="sample among the top_k most likely tokens (0: all)")

    def params(self, stop_token_ids: tuple[int, ...], seed: int | None = None) -> SamplingParams:
        return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_p=self.top_p, top_k=self.top_k,
                              stop_token_ids=stop_token_ids, seed=seed)


class SampledStageConfig(StageConfig, SamplingConfig):
    """A stage that trains on its own samples: ``prompts_per_step`` prompts x ``group_size``
    samples each step (``temperature > 0``), held-out evaluation every ``eval_every`` steps."""

    prompts_per_step: Count = Field(16, description="prompts sampled each step")
    group_size: Count = Field(8, description="samples per prompt (a group)")
    temperature: float = Field(1.0, gt=0,
                               description="sampling temperature of the stage's samples (> 0)")
    eval_every: Every = Field(
        20, description="held-out evaluation every this many steps and after the last (0: never)")
