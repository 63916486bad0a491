"""Sessions: each API key (or ``X-Session-Id`` header) is one session with its own trace.

A trainer issues keys (``issue``) and reads a session back as an episode (``episode``); with
``open_sessions`` any new key starts a session (a plain ``posttrain serve``), otherwise an
unknown key is refused.
"""

from __future__ import annotations

import math
import secrets
import threading

from posttrain.serve.bridge import SessionTrace
from posttrain.types import Episode


class UnknownSession(KeyError):
    """A key no session was issued for."""


class Sessions:
    def __init__(self, open_sessions: bool = True) -> None:
        self.open_sessions = open_sessions
        self._traces: dict[str, SessionTrace] = {}
        self._lock = threading.Lock()

    def issue(self, seed: int | None = None) -> str:
        """A new session's key; ``seed``: its calls sample with seeds derived from it (their
        samples then depend on the session and the call, not on timing)."""
        key = f"pt-{secrets.token_hex(16)}"
        with self._lock:
            self._traces[key] = SessionTrace(seed=seed)
        return key

    def trace(self, key: str) -> SessionTrace:
        with self._lock:
            if key not in self._traces:
                if not self.open_sessions:
                    raise UnknownSession(key)
                self._traces[key] = SessionTrace()
            return self._traces[key]

    def set_reward(self, key: str, reward: float) -> None:
        """The reward an agent reports for its session (``POST /v1/sessions/{key}/reward``):
        a finite number (``ValueError`` otherwise)."""
        if not math.isfinite(reward):
            raise ValueError(f"a session's reward must be a finite number, got {reward}")
        self.trace(key).reward = float(reward)

    def close(self, key: str) -> None:
        """Forget session ``key``: its later calls are refused (open sessions: start anew)."""
        with self._lock:
            self._traces.pop(key, None)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._traces)

    def episode(self, key: str, reward: float | None = None) -> Episode:
        """Session ``key``'s calls as one episode (``SessionTrace.episode``)."""
        return self.trace(key).episode(reward, session=key)
