"""An OpenEnv environment written against OpenEnv's public API (``openenv-core``), trained by
posttrain through ``task.env: openenv:examples/openenv/add_env.py:AddEnvironment``.

Each episode poses an addition drawn from the reset seed; the agent answers in
``<answer>..</answer>`` and gets one more try after a wrong answer. Reward 1 for a right
answer, 0 otherwise; the episode ends on a right answer or after the second try.
"""

import random
import re

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class AddAction(Action):
    answer: str


class AddObservation(Observation):
    prompt: str = ""


class AddEnvironment(Environment[AddAction, AddObservation, State]):
    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.a = self.b = 0

    def reset(self, seed=None, episode_id=None, **kwargs) -> AddObservation:
        rng = random.Random(seed)
        self.a, self.b = rng.randint(10, 99), rng.randint(10, 99)
        self._state = State(episode_id=episode_id, step_count=0)
        return AddObservation(prompt=f"What is {self.a}+{self.b}?")

    def step(self, action: AddAction, timeout_s=None, **kwargs) -> AddObservation:
        self._state.step_count += 1
        found = re.search(r"<answer>\s*(-?\d+)\s*</answer>", action.answer)
        right = found is not None and int(found.group(1)) == self.a + self.b
        done = right or self._state.step_count >= 2
        return AddObservation(prompt="" if done else "Not right. Try once more.",
                              done=done, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state
