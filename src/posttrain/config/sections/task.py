"""The task family a run trains on (``task.name``): the section every member extends, and the
member that a dotted path names (the user's task source). docs/extending.md adds one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Protocol

from pydantic import Field, field_validator, model_validator

from posttrain.config.extension import environment, extension, load_extension
from posttrain.config.family import PATH, Member, member
from posttrain.config.section import Section


@dataclass
class TaskParts:
    """What a task family builds: the task source (``sample(n, rng)``, ``eval_set(n)``), the
    tools the model is shown (None: single turn, no agent loop), the per-episode environment
    factory (tasks whose tools hold per-episode state) and, for a single-turn family whose
    environment scores its completions with the engine's help, ``env_score(engine,
    tokenizer, tasks, completions, sampling) -> [(parts, meta)]``; for a family whose own
    environment plays each episode through ``posttrain serve`` (an environment library's
    loop), ``agent``: an external agent, ``agent(base_url, api_key, task)`` (docs/serve.md)."""

    tasks: Any
    tools: Any = None
    env_factory: Any = None
    env_score: Any = None
    agent: Any = None


class Models(Protocol):
    """The chat models a member may need, placed by the run (``recipes.placement``)."""

    def chat(self, served: Any) -> Any: ...

    def tool_chat(self, served: Any) -> Any: ...


class DifficultyPool(Section):
    """One pool of ``task.curriculum``: the tasks whose latest pass rate is at most
    ``threshold`` (and above the previous pool's), drawn with ``weight`` each."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="the pool's name in metrics")
    threshold: float = Field(
        ge=0, le=1,
        description="tasks whose latest pass rate is at most this (above the previous pool's), in "
                    "[0, 1]")
    weight: float = Field(ge=0, description="the weight a task of this pool is drawn with (>= 0)")


DEFAULT_POOLS = [DifficultyPool(name="hard", threshold=0.25, weight=0.2),
                 DifficultyPool(name="normal", threshold=0.75, weight=1.0),
                 DifficultyPool(name="easy", threshold=1.0, weight=0.2)]


class CurriculumConfig(Section):
    """An online difficulty curriculum for RL (``task.curriculum``; prime-rl's difficulty
    pools; docs/estimators.md): each task of the pool (the train split, or ``pool_size``
    tasks drawn once) is drawn with its difficulty pool's ``weight`` by its latest pass rate,
    ``unseen_weight`` before it is first sampled. The state is part of the checkpoint."""

    pools: list[DifficultyPool] = Field(default_factory=lambda: list(DEFAULT_POOLS), min_length=1,
                                        description="difficulty pools by increasing threshold")
    unseen_weight: float = Field(1.0, ge=0,
                                 description="the weight of a task not yet sampled (>= 0)")
    pool_size: int = Field(1024, ge=1,
                           description="tasks drawn once into the curriculum's pool (>= 1)")

    @model_validator(mode="after")
    def _ordered_pools(self) -> CurriculumConfig:
        thresholds = [p.threshold for p in self.pools]
        if thresholds != sorted(set(thresholds)):
            raise ValueError(f"pool thresholds must increase, got {thresholds}")
        if len({p.name for p in self.pools}) < len(self.pools):
            raise ValueError("pool names must be distinct")
        return self


class TaskFamily(Member):
    """What every task family has. ``eval_fraction`` of the problems are held out. With
    ``efforts`` (levels in 1-100) every prompt carries a ``Reasoning Effort`` system line: SFT
    examples a random level, RL asks each prompt at every level (one group per (prompt,
    effort)), evaluation uses the highest. ``rollout`` (a dotted path) replaces the function
    that plays and scores the episodes (default: one completion a sample, or the agent loop for
    tool tasks). ``curriculum`` draws the RL stage's tasks by their difficulty
    (``CurriculumConfig``). ``env`` (a dotted path) names an environment class of your own
    (``reset(task)``, ``step(action)``; docs/extending.md): every episode of the task's problems
    plays through the agent loop against a fresh instance, ``cls(task)`` or ``cls(task, row)``.

    A member says what it is with class attributes: ``SINGLE_TURN`` (its episodes are single
    completions unless tools are added), ``SCORED_PARTS`` (the reward parts its own environment
    scores, with verifier ``env``: it plays against that environment), ``PARTS_FROM_ENV`` (its
    environment names the parts: any part with verifier ``env``), ``GENERATED`` (its
    problems are generated, so SFT and distillation data can be too), ``PAIRS`` (preference
    pairs can be generated from it) and ``ROW_TOOLS`` (a dataset row may bring its own tools)."""

    FAMILY: ClassVar[str] = "task"
    name: str = Field(
        description="the task family: a built-in member or a dotted path (your task source or "
                    "section)")
    SINGLE_TURN: ClassVar[bool] = False
    SCORED_PARTS: ClassVar[tuple[str, ...]] = ()
    PARTS_FROM_ENV: ClassVar[bool] = False
    GENERATED: ClassVar[bool] = True
    PAIRS: ClassVar[bool] = False
    ROW_TOOLS: ClassVar[bool] = False

    rollout: Annotated[str, extension("rollout")] | None = Field(
        None,
        description="a rollout function by dotted path that plays and scores the episodes instead")
    env: Annotated[str, environment()] | None = Field(
        None, description="an environment class by dotted path that every episode plays against")
    eval_fraction: float = Field(
        0.1, gt=0, lt=1, description="share of the problems held out for evaluation, in (0, 1)")
    efforts: list[int] | None = Field(
        None,
        description="reasoning-effort levels in 1..100, each prompt's system line (null: none)")
    curriculum: CurriculumConfig | None = Field(
        None, description="draw the RL stage's tasks by their latest pass rate (null: uniformly)")

    @field_validator("efforts")
    @classmethod
    def _efforts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (len(set(v)) < 2 or not all(1 <= b <= 100 for b in v)):
            raise ValueError("at least two distinct levels, each in 1..100")
        return v

    @model_validator(mode="after")
    def _one_player(self) -> TaskFamily:
        if self.env is not None and self.SCORED_PARTS:
            raise ValueError(f"task.env: task.name={self.name} plays against its own environment")
        if self.env is not None and self.rollout is not None:
            raise ValueError("task.env is played by the agent loop, which task.rollout "
                             "replaces: set one of them")
        return self

    def build(self, seed: int, models: Models) -> TaskParts:
        """The task source, its tools and environment factory (``TaskParts``)."""
        raise NotImplementedError

    def check(self, cfg) -> None:
        """A task whose problems are not ``GENERATED`` has no conversations to generate: the
        sft and distill stages of ``cfg`` need their ``data``. A curriculum draws the
        synchronous RL stage's tasks."""
        if self.curriculum is not None and ("rl" not in cfg.stages or cfg.rl.mode != "sync"):
            raise ValueError("task.curriculum draws the tasks of the rl stage with "
                             "rl.mode=sync")
        if self.GENERATED:
            return
        for stage in ("sft", "distill"):
            if stage in cfg.stages and getattr(cfg, stage).data is None:
                raise ValueError(f"the {stage} stage on task {self.name} needs {stage}.data "
                                 "(no conversations are generated for it)")


@member("task", PATH)
class TaskSourceConfig(TaskFamily):
    """Your own task source, named by dotted path (``my_pkg.tasks:make``), called as
    ``make(seed, eval_fraction)`` (docs/extending.md): single-turn unless it brings tools."""

    SINGLE_TURN: ClassVar[bool] = True
    GENERATED: ClassVar[bool] = False
    name: Annotated[str, extension("tasks")] = Field(
        description="your task source by dotted path, called as make(seed, eval_fraction)")

    def build(self, seed: int, models: Models) -> TaskParts:
        return TaskParts(load_extension("tasks", self.name)(seed, self.eval_fraction))
