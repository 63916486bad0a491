"""tau-bench tasks as an agent-RL task source: a domain's tasks in a ``train`` and an ``eval``
split (``split_tasks.json``), each episode a ``TauEpisode`` with its own databases and user."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from posttrain.config import Section
from posttrain.config.family import member
from posttrain.config.rules import unread
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.config.served import ChatServer
from posttrain.envs.base import SplitTasks
from posttrain.envs.tau.environment import domain, pristine
from posttrain.envs.tau.episode import TAU_PARTS, TauEpisode, TauLimits, TauScoring, agent_prompt
from posttrain.envs.tau.tasks import BASES, TauTask, load_splits, load_tasks
from posttrain.envs.tau.user import LLMUser, ToolChat, UserSimulator
from posttrain.harness import Tool, ToolRegistry

SPLITS = {"mock": ("base", "base"), "retail": ("train", "test"), "telecom": ("base", "base")}


@dataclass(frozen=True)
class TauPrompt:
    """One task as the agent loop's ``Task``: the agent's system prompt; the reference is the
    task id (the episode's environment looks the task up by it)."""

    task: TauTask
    system: str

    @property
    def reference(self) -> str:
        return self.task.id

    def messages(self) -> list[dict]:
        return [{"role": "system", "content": self.system}]


@functools.cache
def _user_schemas(domain_name: str) -> dict[str, dict]:
    toolkit = domain(domain_name).user_tools
    if toolkit is None:
        return {}
    tools = toolkit(pristine(domain_name)[1]).toolkit().tools  # schemas only: nothing runs
    return {name: Tool(spec.fn).schema for name, spec in tools.items()}


def user_tool_schemas(task: TauTask, domain_name: str) -> list[dict]:
    """The simulated user's tools: the domain's, filtered by ``task.user_tools`` (all if unset)."""
    wanted = task.user_tools
    return [schema for name, schema in _user_schemas(domain_name).items()
            if wanted is None or name in wanted]


# (task, the user tools' schemas) -> the simulated user of one episode
Users = Callable[[TauTask, list[dict]], UserSimulator]


def llm_users(chat: ToolChat) -> Users:
    """Users played by ``chat`` (an engine or an endpoint, ``engines.chat``)."""
    return lambda task, tools: LLMUser(chat, task.scenario_text(), tools)


class TauTasks(SplitTasks):
    """``train`` / ``eval`` splits of ``domain_name`` (default: retail's ``train``/``test``;
    mock and telecom-small ship no split, so both are every task). Each episode talks to its
    own user from ``users``; ``users=None`` is solo mode (only tasks with a ticket)."""

    def __init__(self, domain_name: str, users: Users | None,
                 train_split: str | None = None, eval_split: str | None = None,
                 limits: TauLimits = TauLimits(), scoring: TauScoring = TauScoring()) -> None:
        self.domain_name, self.users = domain_name, users
        self.limits, self.scoring = limits, scoring
        tasks = load_tasks(domain_name)
        self.by_id = {t.id: t for t in tasks}
        splits = load_splits(domain_name, tasks)
        default_train, default_eval = SPLITS[domain_name]
        policy = domain(domain_name).policy()
        self.splits = {}
        for ours, theirs in (("train", train_split or default_train),
                             ("eval", eval_split or default_eval)):
            if theirs not in splits:
                raise ValueError(f"tau domain {domain_name!r} has no split {theirs!r}; "
                                 f"known: {', '.join(splits)}")
            chosen = [self.by_id[i] for i in splits[theirs]]
            if users is None:  # solo mode: the tasks that carry a ticket
                chosen = [t for t in chosen if t.ticket]
                if not chosen:
                    raise ValueError(f"solo mode: no task of {domain_name}'s {theirs!r} "
                                     "split has a ticket")
            self.splits[ours] = [TauPrompt(t, agent_prompt(policy, t.ticket if users is None
                                                           else None)) for t in chosen]

    def make_env(self, reference: str) -> TauEpisode:
        task = self.by_id[reference]
        user = (None if self.users is None
                else self.users(task, user_tool_schemas(task, self.domain_name)))
        return TauEpisode(task, self.domain_name, user, self.limits, self.scoring)


class TauConfig(Section):
    """The tau-bench ``domain``, its splits (default: retail ``train``/``test``; mock and
    telecom-small: every task in both), the conversation limits, the simulated ``user``
    (required unless ``solo``: the agent works each task's ticket alone, only tasks with a
    ticket) and the ``judge`` of ``NL_ASSERTION`` (null: that component is left out and the run
    reports it). ``reward_basis`` overrides every task's."""

    domain: Literal["mock", "retail", "telecom"] = Field(
        "retail", description="the tau-bench domain: mock, retail, telecom")
    train_split: str | None = Field(None,
                                    description="the domain's train split (null: its default)")
    eval_split: str | None = Field(None,
                                   description="the domain's held-out split (null: its default)")
    max_steps: int = Field(200, ge=1, description="most steps of a conversation")
    max_errors: int = Field(10, ge=1, description="tool errors after which a conversation ends")
    reward_basis: list[Literal[BASES]] | None = Field(  # type: ignore[valid-type]
        None, description="the reward components every task is scored on (null: each task's own)")
    solo: bool = Field(
        False, description="the agent works each task's ticket alone, with no simulated user")
    user: ChatServer | None = Field(
        None, description="the simulated user, a served chat model (required unless solo)")
    judge: ChatServer | None = Field(
        None,
        description="the judge of NL_ASSERTION, a served chat model (null: that component left "
                    "out)")

    @model_validator(mode="after")
    def _one_user(self) -> TauConfig:
        if self.solo and self.user is not None:
            raise ValueError("task.tau.solo has no user: unset task.tau.user")
        return self

    def tasks(self, models: Models, users: Users | None = None) -> TauTasks:
        """The tau tasks described, their users played by ``user`` (placed by ``models``; none
        in solo mode; ``users`` when ``user`` is unset), ``NL_ASSERTION`` judged by ``judge``."""
        judge = None if self.judge is None else models.chat(self.judge)
        basis = None if self.reward_basis is None else tuple(self.reward_basis)
        if self.solo:
            users = None
        elif self.user is not None:
            users = llm_users(models.tool_chat(self.user))
        return TauTasks(self.domain, users, self.train_split, self.eval_split,
                        TauLimits(self.max_steps, self.max_errors), TauScoring(basis, judge))


@member("task", "tau")
class TauTaskConfig(TaskFamily):
    """``tau`` (docs/tau.md): tau-bench's customer-service domains, each episode against its own
    databases and simulated user (``tau``: ``TauConfig``); it holds out a split, not a share."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = TAU_PARTS
    GENERATED: ClassVar[bool] = False
    tau: TauConfig = Field(
        TauConfig(), description="the tau-bench domain, splits, limits, simulated user and judge")

    def check(self, cfg) -> None:
        if self.tau.user is None and not self.tau.solo:
            raise ValueError("task.tau.user: tau episodes need a simulated user (a local "
                             "model or an endpoint), or task.tau.solo")
        super().check(cfg)
        if cfg.skills is not None:
            raise ValueError("skills are disclosed in a task's opening messages; tau episodes "
                             "open with their environment's own")
        unread(self, "task", ["eval_fraction"],
               "tau holds out its own split (task.tau.eval_split), not a share")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = self.tau.tasks(models)  # each episode's environment brings the domain's tools
        return TaskParts(tasks, ToolRegistry(), tasks.make_env)
