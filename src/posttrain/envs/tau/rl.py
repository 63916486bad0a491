"""tau-bench tasks as an agent-RL task source: the tasks of a domain in a ``train`` and an
``eval`` split (from ``split_tasks.json``), each episode a ``TauEpisode`` with its own
databases and simulated user."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from posttrain.envs.base import SplitTasks
from posttrain.envs.tau.environment import domain, pristine
from posttrain.envs.tau.episode import TauEpisode, TauLimits, TauScoring, agent_prompt
from posttrain.envs.tau.tasks import TauTask, load_splits, load_tasks
from posttrain.envs.tau.user import LLMUser, ToolChat, UserSimulator
from posttrain.harness import Tool

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
    """The user tools offered to the simulated user: the domain's, filtered by the task's
    ``user_tools`` (all when unset)."""
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
