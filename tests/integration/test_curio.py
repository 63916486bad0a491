"""CURIO through the agent loop: the belief over the user's types after each user turn is the
exact Bayes posterior of the typed-user environment (or the classifier's), the part ``curio``
is the discounted sum of the per-turn rewards, and on recorded episodes of a trained run that
sum telescopes to ``gamma^T phi(b_T) - phi(b_0)``."""

import json
import math
from pathlib import Path

import pytest
import torch
from agent_helpers import ScriptedEngine
from typer.testing import CliRunner

from posttrain.algos.intrinsic import curio_potential, discounted_sum
from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.envs.typed_user import TASTES, posterior
from posttrain.recipes.run_tasks import rollout_function, task_family
from posttrain.rewards import RewardFunction
from posttrain.types import SamplingParams

ENVS = Path(__file__).with_name("curio_envs.py")
MOODY = ["task.env=" + f"{ENVS}:Moody", "reward.parts={solved: {verifier: env}, "
         "curio: {verifier: env, weight: 0.5}}", "reward.accuracy_part=solved",
         "reward.curio={}"]


def play(tokenizer, overrides, replies, config="configs/curio.yaml"):
    cfg = load_config(config, overrides)
    family = task_family(cfg)
    rollout = rollout_function(cfg, family.tools, family.env_factory)
    task = family.tasks.eval_set(1)[0]
    engine = ScriptedEngine(tokenizer, replies)
    (ep,) = rollout(engine, tokenizer, [task], RewardFunction.of(cfg.reward),
                    SamplingParams(max_new_tokens=32))
    return task, ep


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_the_belief_is_the_bayes_posterior_and_the_part_their_discounted_sum(tokenizer, gamma):
    task, ep = play(tokenizer, [f"reward.curio.gamma={gamma}"], [
        "Do you like fruit?", "Do you like chips?", "<answer>sweet</answer>"])
    curio = ep.meta["env"]["curio"]
    liked = {f: task.likes(f) for f in ("fruit", "chips")}
    expected = [[1 / 3] * 3, posterior([("fruit", liked["fruit"])]),
                posterior(list(liked.items()))]
    for got, want in zip(curio["beliefs"], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
    true = TASTES.index(task.taste)
    assert curio["true_type"] == true
    logs = [math.log(b[true]) for b in expected]
    assert curio["rewards"] == pytest.approx(
        [gamma * logs[1] - logs[0], gamma * logs[2] - logs[1]], abs=1e-12)
    assert ep.rewards["curio"] == pytest.approx(gamma ** 2 * logs[2] - logs[0], abs=1e-12)
    assert ep.rewards["correct"] == float(task.taste == "sweet")
    assert ep.reward == pytest.approx(ep.rewards["correct"] + 0.5 * ep.rewards["curio"])


def test_a_turn_that_tells_nothing_earns_nothing(tokenizer):
    _, ep = play(tokenizer, [], ["hello", "Do you like bread?", "<answer>sour</answer>"])
    rewards = ep.meta["env"]["curio"]["rewards"]
    assert rewards[0] == 0.0  # "Ask whether I like a food" is as likely under every taste
    assert rewards[1] == pytest.approx(0.0, abs=1e-12)  # bread: 0.5 under every taste


def test_a_classifier_gives_the_belief_of_a_task_env(tokenizer):
    _, ep = play(tokenizer, [*MOODY, f"reward.curio.classifier={ENVS}:mood_classifier"],
                 ["hi", "and?", "bye"], config="configs/quickstart.yaml")
    curio = ep.meta["env"]["curio"]
    assert curio["user_types"] == ["calm", "angry"]
    assert curio["beliefs"] == [[0.5, 0.5], [0.5, 0.5],
                                [0.9, 0.1] if curio["true_type"] == 0 else [0.1, 0.9]]
    assert ep.rewards["curio"] == pytest.approx(math.log(0.9) - math.log(0.5))
    assert ep.rewards["solved"] == 1.0  # the environment's own part is still its own


def test_a_classifier_giving_no_probability_per_type_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="a probability >= 0 to each of 2 types"):
        play(tokenizer, [*MOODY, f"reward.curio.classifier={ENVS}:bad_classifier"],
             ["hi", "and?", "bye"], config="configs/quickstart.yaml")


def test_an_environment_without_user_types_is_a_clear_error(tokenizer):
    overrides = [o.replace(":Moody", ":Typeless") for o in MOODY]
    with pytest.raises(TypeError, match="Typeless lacks true_type"):
        play(tokenizer, [*overrides, f"reward.curio.classifier={ENVS}:mood_classifier"],
             ["hi"], config="configs/quickstart.yaml")


@pytest.mark.parametrize("overrides,message", [
    (["reward.parts={correct: {verifier: env}}"], "add reward.parts.curio with verifier env"),
    (["reward.curio=null"], "is CURIO's intrinsic reward: set reward.curio"),
    (["task.name=arithmetic"], "needs an environment with a user"),
    (["reward.curio.likelihood=" + f"{ENVS}:mood_likelihood",
      "reward.curio.classifier=" + f"{ENVS}:mood_classifier"], "set one of them"),
    (["reward.curio.form=cube"], "form"),
])
def test_curio_that_cannot_take_effect_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/curio.yaml", overrides)


def test_curio_needs_an_environment_with_a_user():
    with pytest.raises(ConfigError, match="needs an environment with a user"):
        load_config("configs/quickstart.yaml", [
            "reward.parts={correct: {verifier: numeric}, curio: {verifier: env}}",
            "reward.curio={}", "task.name=calculator"])


def test_recorded_episodes_of_a_run_telescope(tmp_path):
    result = CliRunner().invoke(app, [
        "train", "configs/curio.yaml", f"out_dir={tmp_path}", "sft.steps=60", "rl.steps=2",
        "rl.prompts_per_step=4", "rl.group_size=4", "eval.num_problems=8",
        "rl.save_episodes=true", "reward.curio.gamma=0.9"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 16
    turns = 0
    for row in rows:
        curio = row["meta"]["env"]["curio"]
        phi = [float(curio_potential(torch.tensor(b, dtype=torch.float64), curio["true_type"],
                                     "log")) for b in curio["beliefs"]]
        total = discounted_sum(curio["rewards"], 0.9)
        assert total == pytest.approx(0.9 ** (len(phi) - 1) * phi[-1] - phi[0], abs=1e-9)
        assert row["rewards"]["curio"] == pytest.approx(total, abs=1e-12)
        turns += len(curio["rewards"])
    assert turns > len(rows)  # the SFT policy asks questions: beliefs move
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("curio/log_belief" in m for m in metrics)
