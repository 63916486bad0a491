"""``ExternalAgentWorker``: the asynchronous loop's rollout worker (``rollout.async_loop``) for
an external agent. Each dispatched sample is a session of the agent on the worker's served
engine, seeded with the sample's seed; all its sessions run at once and their calls are
batched. Sessions run on while the trainer trains: a weight update (``exclusive``) holds new
calls until it is done, and they then sample under the new weights, every token recording its
version (a partial rollout, cut at call boundaries). A session that outlives ``timeout_s``
ends as ``timeout`` with the turns it finished, and its later calls are refused.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from posttrain.engines import Engine
from posttrain.rewards import RewardFunction
from posttrain.rollout.dispatch import SampleRequest
from posttrain.rollout.external.agents import AgentFn, start
from posttrain.rollout.external.served import ServedEngine, session_episode
from posttrain.types import Episode, SamplingParams

T = TypeVar("T")


@dataclass(eq=False)
class Session:
    """A sample being played: its session key, the agent's future and its deadline."""

    request: SampleRequest
    key: str
    played: concurrent.futures.Future
    deadline: float


class ExternalAgentWorker:
    def __init__(self, agent: AgentFn, engine: Engine, tokenizer, reward_fn: RewardFunction,
                 sampling: SamplingParams, timeout_s: float, poll_s: float = 0.05) -> None:
        """``poll_s``: how long ``step`` waits for a session to end before it returns."""
        self.agent, self.engine, self.tokenizer = agent, engine, tokenizer
        self.reward_fn, self.timeout_s, self.poll_s = reward_fn, timeout_s, poll_s
        self.served = ServedEngine(engine, tokenizer)
        self.served.completer.forced = sampling
        self.inflight: list[Session] = []
        self.tokens_generated = 0

    def admit(self, request: SampleRequest) -> None:
        key = self.served.sessions.issue(request.seed)
        played = start(self.agent, self.served.url, key, request.task)
        self.inflight.append(Session(request, key, played, time.monotonic() + self.timeout_s))

    def step(self) -> list[tuple[SampleRequest, Episode]]:
        """The sessions that ended (or ran out of time) within ``poll_s``, as episodes."""
        concurrent.futures.wait([s.played for s in self.inflight], timeout=self.poll_s,
                                return_when=concurrent.futures.FIRST_COMPLETED)
        now = time.monotonic()
        ended = [s for s in self.inflight if s.played.done() or now >= s.deadline]
        self.inflight = [s for s in self.inflight if s not in ended]
        return [(s.request, self._episode(s)) for s in ended]

    def _episode(self, session: Session) -> Episode:
        request, sessions = session.request, self.served.sessions
        episode = session_episode(sessions, session.key, request.task, str(request.group),
                                  session.played, self.reward_fn, self.tokenizer)
        sessions.close(session.key)  # a late agent's next call is refused
        episode.meta["sample_id"] = request.sample_id
        self.tokens_generated += sum(s.num_trainable for s in episode.segments)
        return episode

    def exclusive(self, fn: Callable[[Engine], T]) -> T:
        """``fn(engine)`` with no call running; calls that come meanwhile wait for it."""
        with self.served.completer.batcher.exclusive() as engine:
            return fn(engine)

    def close(self) -> None:
        """Stop serving: the calls of sessions still playing fail."""
        self.served.close()
