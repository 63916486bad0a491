"""The per-episode environment: tools bound to one episode's private state (a sandbox
workspace, a submission counter) and the reward parts it decides when the episode ends."""

from __future__ import annotations

from typing import Protocol

from posttrain.harness.tools import ToolRegistry


class EpisodeEnv(Protocol):
    """Made by ``AgentLoop``'s ``env_factory(reference)`` for every episode; ``verdict`` feeds
    the reward parts whose verifier is ``env`` and must not raise (bad model output scores 0);
    ``close`` releases the state and may be called more than once (the loop closes every
    environment, also when an episode fails)."""

    tools: ToolRegistry

    def verdict(self, final: str) -> dict[str, float]: ...

    def close(self) -> None: ...
