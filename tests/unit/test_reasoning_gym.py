"""The reasoning-gym adapter: generated tasks, split, and the dataset's own scorer as the
``reasoning_gym`` verifier."""

import json
import random

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.envs import ReasoningGymTasks
from posttrain.rewards import RewardFunction

CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


@pytest.fixture(scope="module")
def tasks():
    return ReasoningGymTasks("chain_sum", seed=3, eval_fraction=0.25, size=40, config=CONFIG)


def test_tasks_are_deterministic_and_split(tasks):
    again = ReasoningGymTasks("chain_sum", seed=3, eval_fraction=0.25, size=40, config=CONFIG)
    assert tasks.splits == again.splits
    assert (len(tasks.splits["train"]), len(tasks.splits["eval"])) == (30, 10)
    train = {p.reference for p in tasks.splits["train"]}
    assert train.isdisjoint(p.reference for p in tasks.splits["eval"])
    p = tasks.eval_set(1)[0]
    assert p.messages()[0]["content"].endswith("<answer></answer> tags.")
    assert json.loads(p.reference)["index"] == 30
    with pytest.raises(ValueError, match="eval split has 10"):
        tasks.eval_set(11)


def test_the_dataset_scorer_is_the_reward(tasks):
    reward = RewardFunction({"correct": ("reasoning_gym", 1.0), "format": ("format", 0.0)})
    p = tasks.sample(1, random.Random(0))[0]
    wrong = str(int(p.answer) + 1)
    assert reward(f"<answer>{p.answer}</answer>", p.reference)[1] == 1.0
    assert reward(f"<answer>{wrong}</answer>", p.reference)[1] == 0.0
    assert reward(p.answer, p.reference)[1] == 0.0  # no answer tags, no answer
    gold = tasks.sft_conversation(p, 0.0, random.Random(0))
    assert gold[-1] == {"role": "assistant", "content": f"<answer>{p.answer}</answer>"}


@pytest.mark.parametrize("overrides,message", [
    (["task.name=reasoning_gym"], "task.dataset"),
    (["task.dataset=chain_sum"], "task.dataset"),
    (["task.name=reasoning_gym", "task.dataset=chain_sum"], "verifier reasoning_gym"),
    (["reward.parts.correct.verifier=reasoning_gym"], "verifier reasoning_gym"),
])
def test_config_ties_the_task_to_its_verifier(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
