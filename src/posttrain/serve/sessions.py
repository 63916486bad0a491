"""Sessions: each API key (or ``X-Session-Id`` header) is one session with its own trace.

A trainer issues keys (``issue``) and reads a session back as an episode (``episode``); with
``open_sessions`` a new key starts a session when its first call is made (a plain ``posttrain
serve``), otherwise an unknown key is refused. Reading a session (``get``) never creates one.
"""

from __future__ import annotations

import math
import secrets
import threading
import time

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
        """Session ``key``'s trace, started now if sessions are open and it has none."""
        with self._lock:
            if key not in self._traces:
                if not self.open_sessions:
                    raise UnknownSession(key)
                self._traces[key] = SessionTrace()
            return self._traces[key]

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._traces

    def get(self, key: str) -> SessionTrace:
        """Session ``key``'s trace; ``UnknownSession`` if there is none (nothing is created)."""
        with self._lock:
            if key not in self._traces:
                raise UnknownSession(key)
            return self._traces[key]

    def set_reward(self, key: str, reward: float) -> None:
        """The reward an agent reports for its session (``POST /v1/sessions/{key}/reward``):
        a finite number (``ValueError`` otherwise)."""
        if not math.isfinite(reward):
            raise ValueError(f"a session's reward must be a finite number, got {reward}")
        self.get(key).reward = float(reward)

    def close(self, key: str) -> None:
        """Forget session ``key``: its later calls are refused (open sessions: start anew)."""
        with self._lock:
            self._traces.pop(key, None)

    def end(self, key: str) -> Episode | None:
        """Forget session ``key`` and return its episode (None if it made no call)."""
        with self._lock:
            trace = self._traces.pop(key, None)
        return trace.episode(session=key) if trace is not None and trace.calls else None

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._traces)

    def activity(self) -> dict[str, int]:
        """Each session's number of calls."""
        with self._lock:
            return {k: t.calls for k, t in self._traces.items()}

    def idle(self, seconds: float) -> list[str]:
        """The sessions whose last call was over ``seconds`` ago."""
        now = time.monotonic()
        with self._lock:
            return [k for k, t in self._traces.items() if now - t.last_call > seconds]

    def episode(self, key: str, reward: float | None = None) -> Episode:
        """Session ``key``'s calls as one episode (``SessionTrace.episode``)."""
        return self.get(key).episode(reward, session=key)
