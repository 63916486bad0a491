"""The chat models a config names, as chat functions (a local model in-process or an
OpenAI-compatible endpoint): the reward judges', a tau run's simulated user and judge, and the
anti-hack guard with its judge."""

from __future__ import annotations

import os

from posttrain.config.extension import load_extension
from posttrain.config.sections.agent import GuardConfig
from posttrain.config.served import ChatServer, ServedModel
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
        engine, tokenizer = TorchEngineConfig(device=cfg.device).load(cfg.model, self.dtype)
        return local(engine, tokenizer, cfg.max_new_tokens, cfg.temperature, self.seed)


def build_guard(cfg: GuardConfig, dtype: str, seed: int) -> Guard:
    """The guard ``cfg`` describes; its judge is the function ``cfg.judge.function`` or the
    chat model ``cfg.judge`` serves, asked ``cfg.judge.prompt``."""
    j = cfg.judge
    judge = None if j is None else (
        load_extension("guard_judge", j.function) if j.function is not None
        else ChatGuardJudge(ServedChats(dtype, seed).chat(j), j.prompt))
    rules = (*DEFAULT_RULES, *(GuardRule(r.name, r.pattern) for r in cfg.rules))
    return Guard(rules, protected_paths=cfg.protected_paths, judge=judge, on_hack=cfg.on_hack)
