"""Config -> the run's parts: its task family (built in or named by dotted path) and the
function that plays its episodes; the judges of its ``reward.judges`` (a prompted grader or
comparison judge served by a local model or an OpenAI-compatible endpoint, a pairwise
classifier, a Bradley-Terry reward model, or a function named by dotted path); and the chat
models of a tau run (its simulated user and its judge)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from posttrain.config import RunConfig
from posttrain.config.reward_config import JudgeConfig
from posttrain.config.task_config import ChatServer, TauConfig
from posttrain.engines import TorchEngine
from posttrain.engines.chat import (
    Chat,
    ToolChat,
    engine_chat,
    engine_tool_chat,
    openai_chat,
    openai_tool_chat,
)
from posttrain.envs import (
    ArithmeticTasks,
    CalculatorTasks,
    CodeTasks,
    ReasoningGymTasks,
    SearchTasks,
    calculate,
)
from posttrain.envs.tau.episode import TauLimits, TauScoring
from posttrain.envs.tau.rl import TauTasks, Users, llm_users
from posttrain.harness import Guard, ToolRegistry
from posttrain.models import load_model, load_tokenizer, load_value_model
from posttrain.recipes.distillation.offline import check_same_vocabulary
from posttrain.rollout import AgentRollout, rollout
from posttrain.rollout.judged import (
    ClassifierCompare,
    ComparisonJudge,
    Judge,
    RewardModelJudge,
    ScoreJudge,
    chat_compare,
)
from posttrain.settings.extension import load_extension
from posttrain.types import Episode


def judge_chat(cfg: JudgeConfig | ChatServer, dtype: str, seed: int) -> Chat:
    """Replies of the model ``cfg`` serves (a local model in-process, or an endpoint)."""
    if cfg.endpoint is not None:
        return openai_chat(cfg.endpoint, cfg.endpoint_model, os.environ.get(cfg.api_key_env),
                           cfg.max_new_tokens, cfg.temperature)
    return engine_chat(*_local(cfg.model, dtype), cfg.max_new_tokens, cfg.temperature, seed)


def tool_chat(cfg: ChatServer, dtype: str, seed: int) -> ToolChat:
    """Tool-using replies of the model ``cfg`` serves (a simulated user)."""
    if cfg.endpoint is not None:
        return openai_tool_chat(cfg.endpoint, cfg.endpoint_model,
                                os.environ.get(cfg.api_key_env), cfg.max_new_tokens,
                                cfg.temperature)
    return engine_tool_chat(*_local(cfg.model, dtype), cfg.max_new_tokens, cfg.temperature,
                            seed)


def _local(path: str, dtype: str) -> tuple[TorchEngine, object]:
    tokenizer = load_tokenizer(path)
    engine = TorchEngine(load_model(path, dtype), tokenizer.pad_token_id,
                         tokenizer.eos_token_id)
    return engine, tokenizer


def build_judge(cfg: JudgeConfig, policy_tokenizer, dtype: str, seed: int) -> Judge:
    """The judge ``cfg`` describes; a reward model must share the policy's vocabulary (it
    scores the sampled token ids as they are)."""
    if cfg.kind == "function":
        return load_extension("judge", cfg.function)
    if cfg.kind == "reward_model":
        check_same_vocabulary(policy_tokenizer, load_tokenizer(cfg.model), "a reward model")
        return RewardModelJudge(load_value_model(cfg.model, dtype),
                                policy_tokenizer.pad_token_id)
    if cfg.kind == "pairwise_model":
        compare = ClassifierCompare(load_value_model(cfg.model, dtype), load_tokenizer(cfg.model))
        return ComparisonJudge(compare, cfg.budget_tokens)
    chat = judge_chat(cfg, dtype, seed)
    if cfg.kind == "comparison":
        return ComparisonJudge(chat_compare(chat, cfg.rubric), cfg.budget_tokens)
    return ScoreJudge(chat, cfg.rubric, cfg.n_samples, cfg.score_max)


def tau_tasks(t: TauConfig, dtype: str, seed: int, users: Users | None = None) -> TauTasks:
    """The tau tasks ``t`` describes, their users played by ``t.user`` (a second engine or an
    endpoint; none in solo mode; ``users`` when ``t.user`` is unset) and ``NL_ASSERTION``
    judged by ``t.judge`` (if set)."""
    judge = None if t.judge is None else judge_chat(t.judge, dtype, seed)
    basis = None if t.reward_basis is None else tuple(t.reward_basis)
    if t.solo:
        users = None
    elif t.user is not None:
        users = llm_users(tool_chat(t.user, dtype, seed))
    return TauTasks(t.domain, users, t.train_split, t.eval_split,
                    TauLimits(t.max_steps, t.max_errors), TauScoring(basis, judge))


def task_family(cfg: RunConfig) -> tuple[Any, ToolRegistry | None, Callable | None]:
    """The task source, the tools the model is shown (None: single turn, no agent loop; with
    ``agent.tools`` added to the task's own) and the per-episode environment factory (tasks
    whose tools hold per-episode state)."""
    tasks, tools, env_factory = _built_in_family(cfg) if not cfg.task.custom else (
        load_extension("tasks", cfg.task.name)(cfg.seed, cfg.task.eval_fraction), None, None)
    if cfg.agent.tools:
        tools = tools or ToolRegistry()
        for spec in cfg.agent.tools:
            tools.add(load_extension("tool", spec))
    return tasks, tools, env_factory


def _built_in_family(cfg: RunConfig) -> tuple[Any, ToolRegistry | None, Callable | None]:
    t = cfg.task
    if t.name == "search":
        tasks = SearchTasks(cfg.seed, t.eval_fraction)
        return tasks, ToolRegistry([tasks.tool]), None
    if t.name == "code":
        tasks = CodeTasks(cfg.seed, t.eval_fraction, policy=t.submissions)
        return tasks, tasks.tools, tasks.make_env
    if t.name == "tau":  # each episode's environment brings the domain's tools
        tasks = tau_tasks(t.tau, cfg.model.dtype, cfg.seed)
        return tasks, ToolRegistry(), tasks.make_env
    if t.name == "reasoning_gym":
        return ReasoningGymTasks(t.dataset, cfg.seed, t.eval_fraction,
                                 config=t.dataset_config), None, None
    if t.name == "calculator":
        tasks = CalculatorTasks(tuple(t.ops), t.digits, cfg.seed, t.eval_fraction)
        return tasks, ToolRegistry([calculate]), None
    return ArithmeticTasks(tuple(t.ops), t.digits, cfg.seed, t.eval_fraction), None, None


def rollout_function(cfg: RunConfig, tools: ToolRegistry | None,
                     env_factory: Callable | None) -> Callable[..., list[Episode]]:
    """What plays and scores episodes: ``task.rollout`` if named, the agent loop when the task
    has ``tools``, else one completion a sample."""
    if cfg.task.rollout is not None:
        return load_extension("rollout", cfg.task.rollout)
    if tools is None:
        return rollout
    tree, guard = cfg.agent.tree, cfg.agent.guard
    return AgentRollout(
        tools, cfg.agent.limits(), cfg.agent.compaction,
        tree=None if tree is None else (tree.branches, tree.rounds), env_factory=env_factory,
        guard=None if guard is None else Guard(protected_paths=guard.protected_paths,
                                               on_hack=guard.on_hack))
