"""The rollout engine served for external agents, and a session read back as a scored episode.

A session's reward is what its agent returned (a number, or a mapping of reward parts whose
sum is the reward: an environment library's own reward functions), else what it posted to
``/v1/sessions/{key}/reward``, else the run's reward function on the agent's last reply. An
agent that raised or was not done in time ends its episode with finish reason ``error`` or
``timeout`` and the turns it finished (rewarded as above); one that made no call gives a
prompt-only episode (nothing to train) with reward 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import Future

from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.rollout.single_turn import sample_of
from posttrain.serve import Completer, Sessions, create_app, running
from posttrain.types import Episode, Segment


class ServedEngine:
    """``engine`` behind ``posttrain serve`` on a free local port (``url``), in this process:
    only keys issued by ``sessions`` are served, whatever model name they ask for; ``close``
    stops it."""

    def __init__(self, engine: Engine, tokenizer) -> None:
        self.engine = engine
        self.sessions = Sessions(open_sessions=False)
        config = getattr(getattr(engine, "model", None), "config", None)
        context = getattr(config, "max_position_embeddings", None) or 4096
        self.completer = Completer(engine, tokenizer, context)
        self._server = running(create_app(self.completer, self.sessions, "policy", any_model=True))
        self.url = self._server.__enter__()

    def close(self) -> None:
        self._server.__exit__(None, None, None)
        self.completer.batcher.close()


def last_reply(segment: Segment) -> list[int]:
    """The tokens of a segment's last sampled reply (its trailing run of trained tokens)."""
    start = len(segment.loss_mask)
    while start > 0 and segment.loss_mask[start - 1]:
        start -= 1
    return segment.token_ids[start:]


def reward_parts(returned: object) -> dict[str, float] | None:
    """An agent's returned mapping of reward parts as floats; None when it returned none. A
    part that is not a finite number is the agent's bug: a ``ValueError`` naming it (the
    episode then ends in ``error``)."""
    if not isinstance(returned, Mapping):
        return None
    parts = {}
    for name, value in returned.items():
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"the agent's reward part {name!r} is {value!r}, not a finite "
                             "number")
        parts[str(name)] = float(value)
    return parts


def session_episode(sessions: Sessions, key: str, task: Task, group: str, played: Future,
                    reward_fn: RewardFunction, tokenizer) -> Episode:
    """Session ``key``'s episode, played (``played``: the agent's result) on ``task``."""
    returned, finish, error = None, "stop", None
    if not played.done() or played.cancelled():
        finish, error = "timeout", "the agent did not finish in time"
    elif played.exception() is not None:
        finish, error = "error", repr(played.exception())
    else:
        returned = played.result()
    trace = sessions.trace(key)
    if not trace.calls:
        prompt = encode_prompt(tokenizer, task.messages())
        return Episode([Segment(prompt, [0] * len(prompt), [0.0] * len(prompt),
                                [-1] * len(prompt))], reward=0.0, group_id=group,
                       finish_reason=finish if error else "error",
                       meta={"agent_error": error or "the agent made no call",
                             "reference": task.reference})
    try:
        parts = reward_parts(returned)
    except ValueError as exc:  # the agent's bug: an error episode, the run goes on
        parts, returned, finish, error = None, None, "error", str(exc)
    episode = trace.episode(session=key)
    meta = {**episode.meta, "reference": task.reference,
            **({"agent_error": error} if error else {})}
    finite = isinstance(returned, int | float) and math.isfinite(returned)
    reported = returned if finite else trace.reward
    if parts is not None:
        rewards, total = parts, sum(parts.values())
    elif reported is not None:
        rewards, total = {"agent": float(reported)}, float(reported)
    else:
        sample = sample_of(tokenizer, task, last_reply(episode.segments[-1]))
        scored = reward_fn.score([sample])[0]
        rewards, total = scored.parts, scored.total
        meta |= {"completion": sample.completion, **reward_fn.episode_meta(scored)}
    return Episode(episode.segments, rewards=rewards, reward=total, group_id=group,
                   finish_reason=finish, meta=meta)
