"""``ExternalAgentRollout``: a synchronous RL step's samples, each a session of the user's
agent, all played at once.

The rollout engine is served in this process (``ServedEngine``; the server lives as long as
the rollout object and follows the engine it is given). One session key per sample; every
agent starts at once, each in its own thread (the server batches their requests). When the
step's agents are done or out of ``timeout_s``, the server stops taking calls and finishes
those it has (no request of a late agent is left running), and the sessions are closed, before
the episodes go to the trainer, whose weight sync then changes the engine under nobody. While
training, the server samples with the run's temperature, top-p and top-k whatever the agent
asks (the trainer recomputes log-probs under them), caps ``max_tokens`` at the run's, and
seeds each session's calls from the step's seed and the session's place (not from timing).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

from posttrain.engines import Engine
from posttrain.engines.sampling import row_seeds
from posttrain.envs import Task
from posttrain.rewards import RewardFunction
from posttrain.rollout.external.agents import AgentFn, start
from posttrain.rollout.external.served import ServedEngine, session_episode
from posttrain.rollout.external.worker import ExternalAgentWorker
from posttrain.types import Episode, SamplingParams


class ExternalAgentRollout:
    def __init__(self, agent: AgentFn, timeout_s: float = 600.0) -> None:
        self.agent, self.timeout_s = agent, timeout_s
        self._served: ServedEngine | None = None

    def _serve(self, engine: Engine, tokenizer) -> ServedEngine:
        if self._served is None or self._served.engine is not engine:
            self.close()
            self._served = ServedEngine(engine, tokenizer)
        return self._served

    def close(self) -> None:
        """Stop the server (a later call starts a new one)."""
        if self._served is not None:
            self._served.close()
            self._served = None

    def worker(self, engine: Engine, tokenizer, reward_fn: RewardFunction,
               sampling: SamplingParams) -> ExternalAgentWorker:
        """Asynchronous RL's rollout worker on ``engine`` for this agent."""
        return ExternalAgentWorker(self.agent, engine, tokenizer, reward_fn, sampling,
                                   self.timeout_s)

    def __call__(self, engine: Engine, tokenizer, tasks: Sequence[Task],
                 reward_fn: RewardFunction, sampling: SamplingParams, group_size: int = 1,
                 group_prefix: str = "") -> list[Episode]:
        served = self._serve(engine, tokenizer)
        sessions, batcher = served.sessions, served.completer.batcher
        served.completer.forced = sampling
        batcher.resume()
        seeds = row_seeds(sampling.seed if sampling.seed is not None else 0,
                          len(tasks) * group_size)
        plays = [(task, f"{group_prefix}{j // group_size}", sessions.issue(seeds[j]))
                 for j, task in enumerate(t for t in tasks for _ in range(group_size))]
        futures = [start(self.agent, served.url, key, task) for task, _, key in plays]
        concurrent.futures.wait(futures, timeout=self.timeout_s)
        batcher.pause()  # late agents' requests: refused from now, drained
        episodes = [session_episode(sessions, key, task, group, future, reward_fn, tokenizer)
                    for (task, group, key), future in zip(plays, futures)]
        for _, _, key in plays:
            sessions.close(key)  # a late agent's next call is refused
        return episodes
