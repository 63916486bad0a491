"""OpenEnv environments as ``task.env`` (``task.env: openenv:pkg.mod:MyEnvironment``; the
``openenv-core`` package, ``pip install 'posttrain[openenv]'``).

An OpenEnv ``Environment`` subclass runs in-process, a fresh instance an episode. ``reset``
is seeded from the task, so a task always starts the same (the task family supplies the
episodes and their seeds). When the reset observation has text, it is the episode's user
message (after the task's system messages, if any): the environment poses its problem;
otherwise the episode opens with the task's messages. Each
policy turn becomes the environment's action: its action class's one text field holds the
turn. Each observation that does not end the episode comes back as a user message. Its
``reward`` goes to the reward part ``openenv`` (verifier ``env``; summed over the steps).

An observation renders as its one text field, or as JSON of its fields (``done``,
``reward`` and ``metadata`` left out). Environments served over HTTP or in containers (an
``EnvClient``) are not adapted: they need their server running.
"""

from __future__ import annotations

import json
import typing
import zlib
from typing import Any

from posttrain.envs.base import StepResult, task_identity

PART = "openenv"  # the reward part the steps' rewards go to
SKIPPED = ("done", "reward", "metadata")


def action_of(env_class: type) -> tuple[type, str]:
    """``env_class``'s action class (``step``'s annotation, or the ``Environment[...]``
    parameter) and its one text field."""
    hint = typing.get_type_hints(env_class.step).get("action")
    if not isinstance(hint, type):
        bases = [b for b in getattr(env_class, "__orig_bases__", ()) if typing.get_args(b)]
        hint = typing.get_args(bases[0])[0] if bases else None
    if not isinstance(hint, type) or not hasattr(hint, "model_fields"):
        raise TypeError(f"{env_class.__name__}.step names no Action class in its annotation "
                        "or its Environment[Action, ...] base")
    text = [n for n, f in hint.model_fields.items() if n not in SKIPPED and f.annotation is str]
    if len(text) != 1:
        raise TypeError(f"{hint.__name__} needs exactly one str field for the policy's turn; "
                        f"it has {text or 'none'}")
    return hint, text[0]


def render(observation: Any) -> str:
    """An observation as text: its one text field, else JSON of its fields."""
    fields = observation.model_dump(exclude=set(SKIPPED))
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(fields) == 1 and texts:
        return texts[0]
    return json.dumps(fields, default=str)


def adapted(spec: str) -> type:
    """A ``task.env`` class playing the OpenEnv environment ``spec`` names (a dotted path)."""
    from openenv.core.env_server.interfaces import Environment

    from posttrain.config.extension import ExtensionError, load_object

    env_class = load_object(spec)
    if not (isinstance(env_class, type) and issubclass(env_class, Environment)):
        raise ExtensionError(f"{spec!r} is not an OpenEnv Environment subclass")
    try:
        action_class, field = action_of(env_class)
    except TypeError as e:
        raise ExtensionError(f"{spec!r}: {e}") from None

    class OpenEnvEpisode:
        """One episode of ``env_class`` (the module's docstring)."""

        def __init__(self, task: Any) -> None:
            self.env = env_class()

        def reset(self, task: Any) -> list[dict]:
            observation = self.env.reset(seed=zlib.crc32(task_identity(task).encode()))
            text = render(observation)
            if not text:
                return task.messages()
            system = [m for m in task.messages() if m["role"] == "system"]
            return system + [{"role": "user", "content": text}]

        def step(self, action: str) -> StepResult:
            observation = self.env.step(action_class(**{field: action}))
            reward = float(observation.reward or 0.0)
            return StepResult(None if observation.done else
                              [{"role": "user", "content": render(observation) or "(no text)"}],
                              {PART: reward}, reward, done=bool(observation.done))

        def close(self) -> None:
            close = getattr(self.env, "close", None)
            if callable(close):
                close()

    OpenEnvEpisode.__name__ = f"OpenEnv[{env_class.__name__}]"
    return OpenEnvEpisode
