"""OpenEnv environments as ``task.env`` (``openenv:PATH``): an environment written against
OpenEnv's public API (examples/openenv/add_env.py) plays through the agent loop, one
instance an episode, seeded from the task; its rewards are the part ``openenv``; what
cannot be adapted is refused by name; a few RL steps train on it."""

import json
import random

import pytest
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.config.extension import ExtensionError, load_environment
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.envs.libraries.openenv_adapter import render

SPEC = "openenv:examples/openenv/add_env.py:AddEnvironment"


def test_an_episode_poses_the_environments_problem_and_plays_two_tries():
    cls = load_environment(SPEC)
    a, b = ArithmeticTasks().sample(2, random.Random(0))
    first = cls(a)
    opening = first.reset(a)
    assert opening == cls(a).reset(a)  # seeded from the task
    assert opening != cls(b).reset(b)
    x, y = map(int, opening[0]["content"].removeprefix("What is ").rstrip("?").split("+"))
    wrong = first.step("<answer>0</answer>")
    assert (wrong.done, wrong.reward_parts, wrong.observation) == (
        False, {"openenv": 0.0}, [{"role": "user", "content": "Not right. Try once more."}])
    right = first.step(f"<answer>{x + y}</answer>")
    assert (right.done, right.reward_parts, right.observation) == (True, {"openenv": 1.0}, None)


class TwoFields(Action):
    answer: str
    note: str


class TwoFieldsEnv(Environment[TwoFields, Observation, State]):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return Observation()

    def step(self, action, timeout_s=None, **kwargs):
        return Observation(done=True)

    @property
    def state(self):
        return State()


class NotAnEnvironment:
    def reset(self):
        pass

    def step(self, action):
        pass


@pytest.mark.parametrize(("name", "error"), [
    ("TwoFieldsEnv", "exactly one str field"),
    ("NotAnEnvironment", "not an OpenEnv Environment"),
])
def test_what_cannot_be_adapted_is_refused_by_name(name, error):
    with pytest.raises(ExtensionError, match=error):
        load_environment(f"openenv:tests/integration/test_openenv_adapter.py:{name}")
    with pytest.raises(ConfigError, match="task.env"):
        load_config(None, [f"task.env=openenv:tests/integration/test_openenv_adapter.py:{name}",
                           "reward.parts={openenv: {verifier: env}}",
                           "reward.accuracy_part=openenv"])


def test_observations_render_as_their_text_or_as_json():
    class Many(Observation):
        board: list[int] = [1, 2]
        hint: str = "go"

    class One(Observation):
        text: str = "hello"

    assert render(One()) == "hello"
    assert json.loads(render(Many())) == {"board": [1, 2], "hint": "go"}


def test_a_few_rl_steps_train_on_the_openenv_environment(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "examples/openenv/add.yaml", "model.preset=nano", "threads=1", "sft.steps=2",
        "sft.batch_size=4", "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2",
        "rl.max_new_tokens=8", "eval.num_problems=2", "eval.max_new_tokens=8",
        f"out_dir={out}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if r.get("stage") == "rl" and "reward/openenv" in r]
    assert len(steps) == 2 and all(r["turns"] >= 1 for r in steps)
