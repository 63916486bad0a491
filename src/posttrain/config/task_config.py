"""The task a run trains on and how its episodes are played: built-in task families or a
task source named by dotted path, a rollout function, extra tools, and the agent's limits."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.served import FunctionOrServed, ServedModel, check_fields
from posttrain.envs.code import VERDICT_PARTS
from posttrain.envs.tau.episode import TAU_PARTS
from posttrain.envs.tau.tasks import BASES
from posttrain.harness.compaction import Compaction
from posttrain.harness.context import RETENTION
from posttrain.harness.guard import GUARD_PROMPT
from posttrain.harness.limits import LoopLimits
from posttrain.harness.multi.swarm import SUBAGENT_PROMPT
from posttrain.harness.verifier import SubmissionPolicy
from posttrain.settings import Section
from posttrain.settings.data_config import DatasetConfig
from posttrain.settings.extension import (
    environment,
    extension,
    is_path,
    load_extension,
    tool_set,
)

BUILT_IN_TASKS = ("arithmetic", "calculator", "search", "code", "reasoning_gym", "tau",
                  "dataset", "lookup")
SINGLE_TURN_TASKS = ("arithmetic", "reasoning_gym", "dataset")


TASK_KEYS = {"ops": ("arithmetic", "calculator"), "digits": ("arithmetic", "calculator"),
             "submissions": ("code",), "dataset_config": ("reasoning_gym",), "tau": ("tau",)}


ENV_TASK_PARTS = {"code": VERDICT_PARTS, "tau": TAU_PARTS}  # tasks whose environment scores


class ChatServer(ServedModel):
    """A chat model (a simulated user, a judge of ``NL_ASSERTION``) served from ``model`` or
    ``endpoint`` (``ServedModel``)."""

    @model_validator(mode="after")
    def _served_once(self) -> ChatServer:
        self.served_once("a chat model")
        return self


class TauConfig(Section):
    """``task.name=tau`` (docs/tau.md): the tau-bench ``domain``, its splits (default: retail
    ``train``/``test``; mock and telecom-small: every task in both), the conversation limits,
    the simulated ``user`` (required unless ``solo``: the agent works each task's ticket alone,
    only tasks with a ticket) and the ``judge`` of ``NL_ASSERTION`` (null: that component is
    left out and the run reports it). ``reward_basis`` overrides every task's."""

    domain: Literal["mock", "retail", "telecom"] = "retail"
    train_split: str | None = None
    eval_split: str | None = None
    max_steps: int = Field(200, ge=1)
    max_errors: int = Field(10, ge=1)
    reward_basis: list[Literal[BASES]] | None = None  # type: ignore[valid-type]
    solo: bool = False
    user: ChatServer | None = None
    judge: ChatServer | None = None

    @model_validator(mode="after")
    def _one_user(self) -> TauConfig:
        if self.solo and self.user is not None:
            raise ValueError("task.tau.solo has no user: unset task.tau.user")
        return self


class TreeConfig(Section):
    """``tree_grpo`` rollouts: each of ``M`` backbone episodes per prompt grows ``rounds`` (L)
    times ``branches`` (N) branches from intermediate turns; ``rl.group_size`` is
    ``M (L N + 1)``."""

    branches: int = Field(2, ge=1)
    rounds: int = Field(1, ge=1)

    @property
    def per_backbone(self) -> int:
        return self.rounds * self.branches + 1


class GuardJudge(FunctionOrServed):
    """The guard's judge of a flagged tool call (docs/agents.md): ``function`` (a dotted path,
    ``f(call, flags) -> bool``: True when the call is a hack) or a chat model served from
    ``model`` or ``endpoint`` (``ServedModel``), asked ``prompt`` (``{call}`` and ``{flags}``
    filled in) and answering yes or no. A judge that fails or answers neither confirms the
    flag, and the episode counts it (``guard_judge_failures``)."""

    WHAT: ClassVar[str] = "guard judge"
    PROMPTS: ClassVar[tuple[str, ...]] = ("prompt",)
    function: Annotated[str, extension("guard_judge")] | None = None
    prompt: str = GUARD_PROMPT
    endpoint_model: str = "judge"
    max_new_tokens: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _prompt_fields(self) -> GuardJudge:
        check_fields(self.prompt, "prompt", call="", flags="")
        return self


class GuardRuleConfig(Section):
    """One more guard rule: ``pattern`` (a regex, case ignored) searched in a call's name and
    JSON arguments flags it as ``name``."""

    name: str = Field(min_length=1)
    pattern: str = Field(min_length=1)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"not a regular expression: {e}") from None
        return pattern


class GuardConfig(Section):
    """The online anti-hack guard (docs/agents.md): the default rules plus
    ``protected_paths`` and ``rules`` (``posttrain env audit`` proposes both for the holes it
    finds); ``judge`` (null: every flag is a hack) confirms a flag or clears it; ``on_hack``
    ``block`` (dummy result) or ``zero_reward``."""

    protected_paths: list[str] = Field(default_factory=list)
    rules: list[GuardRuleConfig] = Field(default_factory=list)
    judge: GuardJudge | None = None
    on_hack: Literal["block", "zero_reward"] = "block"


class SwarmConfig(Section):
    """Agent swarms (Kimi K2.5's PARL; docs/agents.md): every episode is an orchestrator that
    may ``spawn(task)`` sub-agents and ``wait(handles)`` for them. A sub-agent is the same
    model on the same engine (those an orchestrator waits for are batched), with ``prompt``,
    its task and the task's tools, within ``max_turns``; at most ``max_subagents`` an
    episode. ``target`` sub-agents earn the whole ``parallel`` part (PARL's instantiation
    reward; the ``parl`` shaping rule, or a reward part ``parallel``/``finish`` with verifier
    ``env``)."""

    max_subagents: int = Field(8, ge=1)
    target: int = Field(4, ge=1)
    max_turns: int = Field(4, ge=1)
    prompt: str = Field(SUBAGENT_PROMPT, min_length=1)


class AgentConfig(Section):
    """Limits of an agent episode (tool-using tasks such as ``calculator``); the per-turn token
    budget is ``rl.max_new_tokens`` (``eval.max_new_tokens`` in evaluation) and ``max_tokens``
    the context window. ``compaction`` manages the window (docs/agents.md); ``tree`` shapes
    ``tree_grpo`` rollouts; ``guard`` (null: off) inspects every tool call;
    ``retain_reasoning`` says what happens to earlier turns' reasoning when a new user turn
    arrives (a simulated user's or an environment's message): ``keep_all`` (stays in
    context; the loop only appends), ``drop_on_new_user`` (removed; the episode continues in
    a new segment) or ``auto_v4`` (kept when the episode has called tools). ``tools``: typed
    functions added to the task's tools, each entry a function (``module:fn``), a list of
    them (``module:TOOLS``) or a module (``my_tools.py``: its public functions); a task
    without tools then plays through the agent loop. ``external`` (``pkg.mod:fn``, called as
    ``fn(base_url, api_key, task)``) or ``external_command`` (a program; docs/serve.md): the
    user's own agent plays each sample against ``posttrain serve`` on the rollout engine,
    within ``timeout_s``, and its session's recording is the episode."""

    max_turns: int = Field(4, ge=1)
    max_tokens: int = Field(512, ge=16)
    timeout_s: float = Field(120.0, gt=0)
    max_tool_errors: int = Field(3, ge=0)
    loop_repeats: int = Field(3, ge=2)
    compaction: Compaction = Compaction()
    tree: TreeConfig | None = None
    guard: GuardConfig | None = None
    retain_reasoning: Literal[RETENTION] = "keep_all"  # type: ignore[valid-type]
    tools: list[Annotated[str, tool_set()]] = Field(default_factory=list)
    external: Annotated[str, extension("external_agent")] | None = None
    external_command: str | None = None
    swarm: SwarmConfig | None = None

    @property
    def plays_externally(self) -> bool:
        """Whether the user's own agent plays the episodes (``external`` or
        ``external_command``) against ``posttrain serve``."""
        return self.external is not None or self.external_command is not None

    @model_validator(mode="after")
    def _one_external_agent(self) -> AgentConfig:
        if self.external is not None and self.external_command is not None:
            raise ValueError("agent.external and agent.external_command both name the agent: "
                             "set one")
        if self.plays_externally and self.tools:
            raise ValueError("agent.tools are tools of posttrain's agent loop; an external "
                             "agent (agent.external / external_command) brings its own")
        return self

    def limits(self) -> LoopLimits:
        """The episode limits (the per-turn budget comes with each call's sampling)."""
        return LoopLimits(**self.model_dump(include=set(LoopLimits.__dataclass_fields__)))


class TaskConfig(Section):
    """The task family: prompts from the user's dataset (``dataset``: the ``data`` section,
    ``DatasetConfig``; docs/datasets.md), a task source named by dotted path
    (``my_pkg.tasks:make``, called with ``(seed, eval_fraction)``; docs/extending.md) or a
    built-in one: ``arithmetic`` (single turn), ``calculator`` (a ``calculate`` tool through
    the agent loop; SFT on tool-use traces) or ``search`` (likewise, with a BM25
    ``search`` tool over fictional fact cards; ``ops`` and ``digits`` do not apply) or ``code``
    (write a function in a sandbox; ``run_python`` and ``submit`` tools; hidden tests decide the
    reward parts ``correct``, ``f2p``, ``p2p`` and ``submissions``, scored with verifier
    ``env``; ``submissions`` caps submissions, each after the first costing ``penalty``). With
    ``efforts`` (levels in 1-100) every prompt carries a ``Reasoning Effort`` system line: SFT
    examples a random level, RL asks each prompt at every level (one group per (prompt,
    effort)), evaluation uses the highest. ``rollout`` (a dotted path) replaces the function
    that plays and scores the episodes (default: one completion a sample, or the agent loop for
    tool tasks). ``env`` (a dotted path) names an environment class of your own
    (``reset(task)``, ``step(action)``; docs/extending.md): every episode of the task's problems
    plays through the agent loop against a fresh instance, ``cls(task)`` or ``cls(task,
    row)``. ``lookup`` (sums of codes a ``lookup`` tool reads from long records; with
    ``agent.swarm``, the swarm task family) takes no ``ops`` or ``digits``."""

    @field_validator("name")
    @classmethod
    def _known_task(cls, v: str) -> str:
        if is_path(v):
            load_extension("tasks", v)
        elif v not in BUILT_IN_TASKS:
            raise ValueError(f"unknown task {v!r}; built in: {', '.join(BUILT_IN_TASKS)}, or a "
                             "dotted path to a task source (package.module:name)")
        return v

    @property
    def custom(self) -> bool:
        """Whether the task source is the user's (named by dotted path)."""
        return is_path(self.name)

    name: str = "arithmetic"
    rollout: Annotated[str, extension("rollout")] | None = None
    env: Annotated[str, environment()] | None = None
    ops: list[Literal["+", "-", "*"]] = Field(default_factory=lambda: ["+"], min_length=1)
    digits: int = Field(2, ge=1, le=9)
    eval_fraction: float = Field(0.1, gt=0, lt=1)
    efforts: list[int] | None = None
    submissions: SubmissionPolicy = SubmissionPolicy()
    dataset: str | None = None
    dataset_config: dict[str, Any] = Field(default_factory=dict)
    tau: TauConfig = TauConfig()
    data: DatasetConfig | None = None

    @model_validator(mode="after")
    def _dataset(self) -> TaskConfig:
        if (self.name == "reasoning_gym") != (self.dataset is not None):
            raise ValueError("task.dataset (a reasoning-gym dataset name) goes with "
                             "task.name=reasoning_gym")
        if (self.name == "dataset") != (self.data is not None):
            raise ValueError("task.data (your dataset: path and columns) goes with "
                             "task.name=dataset")
        if self.env is not None and self.name in ENV_TASK_PARTS:
            raise ValueError(f"task.env: task.name={self.name} plays against its own "
                             "environment")
        if self.env is not None and self.rollout is not None:
            raise ValueError("task.env is played by the agent loop, which task.rollout "
                             "replaces: set one of them")
        return self

    @field_validator("efforts")
    @classmethod
    def _efforts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (len(set(v)) < 2 or not all(1 <= b <= 100 for b in v)):
            raise ValueError("at least two distinct levels, each in 1..100")
        return v
