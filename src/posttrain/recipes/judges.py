"""The chat models and judges a config names: a judge of ``reward.judges`` (a prompted grader
or comparison judge served by a local model or an OpenAI-compatible endpoint, a pairwise
classifier, a Bradley-Terry reward model, or a function named by dotted path), the chat
functions of a tau run's simulated user and judge, and the anti-hack guard with its judge."""

from __future__ import annotations

import os

from posttrain.config.agent_config import GuardConfig
from posttrain.config.reward_config import JudgeConfig
from posttrain.engines.chat import (
    Chat,
    ToolChat,
    engine_chat,
    engine_tool_chat,
    openai_chat,
    openai_tool_chat,
)
from posttrain.engines.torch_member import TorchEngineConfig
from posttrain.harness import Guard
from posttrain.harness.guard import DEFAULT_RULES, ChatGuardJudge, GuardRule
from posttrain.models import check_same_vocabulary, load_tokenizer, load_value_model
from posttrain.models.devices import placed
from posttrain.rollout.judged import (
    ClassifierCompare,
    ComparisonJudge,
    Judge,
    RewardModelJudge,
    ScoreJudge,
    chat_compare,
)
from posttrain.settings.extension import load_extension
from posttrain.settings.served import ChatServer, ServedModel


class ServedChats:
    """Chat functions of the models a config names (``ServedModel``): a local model placed
    in-process in ``dtype``, or an endpoint; local replies sampled with ``seed``."""

    def __init__(self, dtype: str, seed: int) -> None:
        self.dtype, self.seed = dtype, seed

    def chat(self, cfg: ServedModel) -> Chat:
        """Replies of the model ``cfg`` serves."""
        return self._served(cfg, openai_chat, engine_chat)

    def tool_chat(self, cfg: ChatServer) -> ToolChat:
        """Tool-using replies of the model ``cfg`` serves (a simulated user)."""
        return self._served(cfg, openai_tool_chat, engine_tool_chat)

    def _served(self, cfg: ServedModel, remote, local):
        if cfg.endpoint is not None:
            return remote(cfg.endpoint, cfg.endpoint_model, os.environ.get(cfg.api_key_env),
                          cfg.max_new_tokens, cfg.temperature)
        tokenizer = load_tokenizer(cfg.model)
        engine = TorchEngineConfig(device=cfg.device).build(
            cfg.model, self.dtype, tokenizer.pad_token_id, tokenizer.eos_token_id)
        return local(engine, tokenizer, cfg.max_new_tokens, cfg.temperature, self.seed)


def build_judge(cfg: JudgeConfig, policy_tokenizer, dtype: str, seed: int) -> Judge:
    """The judge ``cfg`` describes; a reward model must share the policy's vocabulary (it
    scores the sampled token ids as they are)."""
    if cfg.kind == "function":
        return load_extension("judge", cfg.function)
    if cfg.kind == "reward_model":
        check_same_vocabulary(policy_tokenizer, load_tokenizer(cfg.model), "a reward model")
        return RewardModelJudge(placed(load_value_model(cfg.model, dtype), cfg.device),
                                policy_tokenizer.pad_token_id)
    if cfg.kind == "pairwise_model":
        compare = ClassifierCompare(placed(load_value_model(cfg.model, dtype), cfg.device),
                                    load_tokenizer(cfg.model))
        return ComparisonJudge(compare, cfg.budget_tokens)
    chat = ServedChats(dtype, seed).chat(cfg)
    if cfg.kind == "comparison":
        return ComparisonJudge(chat_compare(chat, cfg.rubric), cfg.budget_tokens)
    return ScoreJudge(chat, cfg.rubric, cfg.n_samples, cfg.score_max)


def build_guard(cfg: GuardConfig, dtype: str, seed: int) -> Guard:
    """The guard ``cfg`` describes; its judge is the function ``cfg.judge.function`` or the
    chat model ``cfg.judge`` serves, asked ``cfg.judge.prompt``."""
    j = cfg.judge
    judge = None if j is None else (
        load_extension("guard_judge", j.function) if j.function is not None
        else ChatGuardJudge(ServedChats(dtype, seed).chat(j), j.prompt))
    rules = (*DEFAULT_RULES, *(GuardRule(r.name, r.pattern) for r in cfg.rules))
    return Guard(rules, protected_paths=cfg.protected_paths, judge=judge, on_hack=cfg.on_hack)
