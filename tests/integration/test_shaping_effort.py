"""Reward shaping and effort control in the RL loop."""


import pytest

from posttrain.config import ConfigError, load_config
from posttrain.envs import ArithmeticTasks, EffortTask
from posttrain.rollout.reward_shaping import shape_rewards
from posttrain.settings import ShapingRule
from posttrain.types import Episode, Segment


def episode(reward, n_tokens, group="g", effort=None):
    seg = Segment.from_prompt_completion([1, 2], list(range(3, 3 + n_tokens)), [-0.1] * n_tokens)
    return Episode([seg], rewards={"correct": reward}, reward=reward, group_id=group,
                   meta={"effort": effort})


def test_rules_apply_in_order_and_keep_the_raw_reward():
    eps = [episode(1.0, 6), episode(1.0, 9), episode(0.0, 12)]
    rules = [ShapingRule(name="dapo_overlong", max_length=10, cache_length=4),
             ShapingRule(name="budget_penalty", budget=10, tau=1.0)]
    shaped = shape_rewards(eps, rules, step=0)
    assert [e.reward for e in shaped] == [1.0, 1.0 - 0.75, -1.0]
    assert [e.meta["raw_reward"] for e in shaped] == [1.0, 1.0, 0.0]
    assert shape_rewards(eps, [], 0) == eps


def test_toggle_and_concave_rules():
    eps = [episode(1.0, 5), episode(1.0, 20), episode(1.0, 8), episode(0.0, 3)]
    toggle = ShapingRule(name="toggle", budget=10, m=4, lam=0.5)
    assert [e.reward for e in shape_rewards(eps, [toggle], step=1)] == [1.0, 0.0, 1.0, 0.0]
    assert [e.reward for e in shape_rewards(eps, [toggle], step=5)] == [1.0, 1.0, 1.0, 0.0]
    concave = ShapingRule(name="concave_length_penalty", coef=0.1, k=0.0, q=0.5)  # C(x) = x
    assert shape_rewards(eps, [concave], 0)[0].reward == pytest.approx(1.0 - 0.5)


def test_effort_penalty_reads_each_episodes_effort():
    eps = [episode(1.0, 60, effort=50), episode(1.0, 60, effort=100)]
    rule = ShapingRule(name="effort_length_penalty", k_p=1.0, lam=1.0, c_max=0.5, l_norm=80)
    shaped = shape_rewards(eps, [rule], 0, efforts=[50, 75, 100])
    assert shaped[0].reward == pytest.approx(0.5)
    assert shaped[1].reward == pytest.approx(1 - 0.10150, rel=1e-4)


def test_effort_task_puts_the_level_in_the_system_prompt():
    problem = ArithmeticTasks(("+",), 1).sample(1, __import__("random").Random(0))[0]
    task = EffortTask(problem, 75)
    messages = task.messages()
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("Reasoning Effort: 75 (range 1--100")
    assert messages[1:] == problem.messages() and task.reference == problem.reference


def test_shaping_config_validation():
    cfg = load_config(None, ["task.efforts=[50, 100]",
                             "reward.shaping=[{name: effort_length_penalty, k_p: 1, lam: 1, "
                             "c_max: 0.5, l_norm: 64}]"])
    assert cfg.reward.shaping[0].options()["l_norm"] == 64
    with pytest.raises(ConfigError, match="needs task.efforts"):
        load_config(None, ["reward.shaping=[{name: effort_length_penalty, k_p: 1, lam: 1, "
                           "c_max: 0.5, l_norm: 64}]"])
    with pytest.raises(ConfigError, match="does not take tau"):
        load_config(None, ["reward.shaping=[{name: dapo_overlong, max_length: 9, "
                           "cache_length: 3, tau: 1}]"])
    with pytest.raises(ConfigError, match="at least two distinct levels"):
        load_config(None, ["task.efforts=[50]"])
