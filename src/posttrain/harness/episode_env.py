"""The per-episode environment: tools bound to one episode's private state (a sandbox
workspace, a submission counter) and the reward parts it decides when the episode ends."""

from __future__ import annotations

from typing import Protocol

from posttrain.harness.tools import ToolRegistry


class EpisodeEnv(Protocol):
    """Made by ``AgentLoop``'s ``env_factory(reference)`` for every episode; ``verdict`` feeds
    the reward parts whose verifier is ``env`` and must not raise (bad model output scores 0);
    ``close`` releases the state and may be called more than once (the loop closes every
    environment, also when an episode fails). An ``info()`` method, where there is one,
    returns what goes into the episode's ``meta["env"]``."""

    tools: ToolRegistry

    def verdict(self, final: str) -> dict[str, float]: ...

    def close(self) -> None: ...


class ConversationEnv(EpisodeEnv, Protocol):
    """An environment with another party (a simulated user). The episode opens with
    ``opening()`` after the task's messages (context, loss mask 0); a turn of the policy without
    tool calls goes to ``reply``, which returns the other party's next message (a text,
    appended as a ``user`` turn, or a list of chat messages, appended as they are; loss mask 0)
    and a stop reason when the conversation is over (then the message is not appended).
    ``stop_reason`` is asked after every tool turn too (step and error limits of the
    environment's own protocol); ``calls_text`` receives a tool-call turn's text without its
    calls, before they run; ``info`` goes into the episode's ``meta["env"]``."""

    def opening(self) -> list[dict]: ...

    def reply(self, text: str) -> tuple[str | list[dict] | None, str | None]: ...

    def calls_text(self, text: str) -> None: ...

    def stop_reason(self) -> str | None: ...

    def info(self) -> dict: ...


def is_conversation(env: EpisodeEnv | None) -> bool:
    return env is not None and callable(getattr(env, "reply", None))
