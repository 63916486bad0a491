"""RL on agents posttrain did not write: each sample is a session on ``posttrain serve``.

``ExternalAgentRollout`` serves the rollout engine (in this process, on a free port; the
server lives as long as the rollout object and follows the engine it is given; it answers
whatever model name the agent asks for), issues one session key per sample, and runs the
user's agent, ``agent(base_url, api_key, task)``, for all the step's samples at once, each in
its own thread (the server batches their requests). When the step's agents are done or out of
time, their sessions are closed and the engine is drained (no request of a late agent is left
running) before the episodes go to the trainer, whose weight sync then changes the engine
under nobody. Each session's recorded
segments become the episode. Its reward is the number the agent returns, else what it posted
to ``/v1/sessions/{key}/reward``, else the run's reward function on the agent's last reply.
An agent that raises or outlives ``timeout_s`` ends its episode with finish reason ``error``
or ``timeout`` and the turns it finished (its reward as above, from its last reply); one that
made no call gives a prompt-only episode (nothing to train) with reward 0. While training,
the server samples with the run's temperature, top-p and top-k whatever the agent asks (the
trainer recomputes log-probs under them) and caps ``max_tokens`` at the run's.

``command_agent(cmd)`` is an agent that runs a program: the task as JSON on its stdin,
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` set,
and its reward (if any) as the last line of its output.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from posttrain.engines import Engine
from posttrain.engines.sampling import row_seeds
from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.rollout.single_turn import sample_of
from posttrain.serve import Completer, Sessions, create_app, running
from posttrain.types import Episode, SamplingParams, Segment

AgentFn = Callable[[str, str, Task], Any]


def command_agent(command: str, timeout_s: float = 600.0) -> AgentFn:
    """An agent that is a program (see the module's docstring)."""
    def agent(base_url: str, api_key: str, task: Task) -> float | None:
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key,
               "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
               "ANTHROPIC_API_KEY": api_key}
        row = {"messages": task.messages(), "reference": task.reference,
               "row": getattr(task, "row", {})}
        done = subprocess.run(shlex.split(command), input=json.dumps(row), env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{command!r} exited with {done.returncode}: "
                               f"{done.stderr.strip()[-500:]}")
        last = (done.stdout.strip().splitlines() or [""])[-1]
        try:
            return float(last)
        except ValueError:
            return None  # (a non-finite number is treated the same, by the rollout)
    return agent


def last_reply(segment: Segment) -> list[int]:
    """The tokens of a segment's last sampled reply (its trailing run of trained tokens)."""
    start = len(segment.loss_mask)
    while start > 0 and segment.loss_mask[start - 1]:
        start -= 1
    return segment.token_ids[start:]


class ExternalAgentRollout:
    def __init__(self, agent: AgentFn, timeout_s: float = 600.0) -> None:
        self.agent, self.timeout_s = agent, timeout_s
        self._served: tuple[Engine, Sessions, Completer, str, Any] | None = None

    def _serve(self, engine: Engine, tokenizer) -> tuple[Sessions, Completer, str]:
        if self._served is None or self._served[0] is not engine:
            self.close()
            sessions = Sessions(open_sessions=False)
            context = getattr(getattr(getattr(engine, "model", None), "config", None),
                              "max_position_embeddings", None) or 4096
            completer = Completer(engine, tokenizer, context)
            server = running(create_app(completer, sessions, "policy", any_model=True))
            url = server.__enter__()
            self._served = (engine, sessions, completer, url, server)
        _, sessions, completer, url, _ = self._served
        return sessions, completer, url

    def close(self) -> None:
        """Stop the server (a later call starts a new one)."""
        if self._served is not None:
            self._served[4].__exit__(None, None, None)
            self._served[2].batcher.close()
            self._served = None

    def __call__(self, engine: Engine, tokenizer, tasks: Sequence[Task],
                 reward_fn: RewardFunction, sampling: SamplingParams, group_size: int = 1,
                 group_prefix: str = "") -> list[Episode]:
        sessions, completer, url = self._serve(engine, tokenizer)
        completer.forced = sampling
        completer.batcher.resume()
        seeds = row_seeds(sampling.seed if sampling.seed is not None else 0,
                          len(tasks) * group_size)  # each session's, fixed by the step
        plays = [(task, f"{group_prefix}{j // group_size}", sessions.issue(seeds[j]))
                 for j, task in enumerate(t for t in tasks for _ in range(group_size))]
        pool = concurrent.futures.ThreadPoolExecutor(len(plays))  # every agent starts now
        futures = [pool.submit(self.agent, url, key, task) for task, _, key in plays]
        concurrent.futures.wait(futures, timeout=self.timeout_s)
        pool.shutdown(wait=False, cancel_futures=True)
        completer.batcher.pause()  # late agents' requests: refused from now, drained
        episodes = [self._episode(sessions, key, task, group, future, reward_fn, tokenizer)
                    for (task, group, key), future in zip(plays, futures)]
        for _, _, key in plays:
            sessions.close(key)  # a late agent's next call is refused
        return episodes

    @staticmethod
    def _episode(sessions: Sessions, key: str, task: Task, group: str,
                 future: concurrent.futures.Future, reward_fn: RewardFunction,
                 tokenizer) -> Episode:
        returned, finish, error = None, "stop", None
        if not future.done() or future.cancelled():
            finish, error = "timeout", "the agent did not finish in time"
        elif future.exception() is not None:
            finish, error = "error", repr(future.exception())
        else:
            returned = future.result()
        trace = sessions.trace(key)
        if not trace.calls:
            prompt = encode_prompt(tokenizer, task.messages())
            return Episode([Segment(prompt, [0] * len(prompt), [0.0] * len(prompt),
                                    [-1] * len(prompt))], reward=0.0, group_id=group,
                           finish_reason=finish if error else "error",
                           meta={"agent_error": error or "the agent made no call",
                                 "reference": task.reference})
        episode = trace.episode(session=key)
        meta = {**episode.meta, "reference": task.reference,
                **({"agent_error": error} if error else {})}
        finite = isinstance(returned, int | float) and math.isfinite(returned)
        reported = returned if finite else trace.reward
        if reported is not None:
            rewards, total = {"agent": float(reported)}, float(reported)
        else:
            sample = sample_of(tokenizer, task, last_reply(episode.segments[-1]))
            scored = reward_fn.score([sample])[0]
            rewards, total = scored.parts, scored.total
            meta |= {"completion": sample.completion, **reward_fn.episode_meta(scored)}
        return Episode(episode.segments, rewards=rewards, reward=total, group_id=group,
                       finish_reason=finish, meta=meta)
