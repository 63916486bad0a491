"""Reward shaping and effort control in the RL loop."""


import pytest

from posttrain.config import ConfigError, ShapingRule, load_config
from posttrain.envs import ArithmeticTasks
from posttrain.features.effort.task import EffortTask
from posttrain.rollout.scoring import shape_rewards
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
    shaped = shape_rewards(eps, [rule], 0, given={"effort_grid": [50, 75, 100]})
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


def prompted(reward, n_tokens, prompt, group="g"):
    seg = Segment.from_prompt_completion(prompt, [7] * n_tokens, [-0.1] * n_tokens)
    return Episode([seg], rewards={"correct": reward}, reward=reward, group_id=group)


def test_a_prompts_budget_is_the_percentile_of_its_first_groups_correct_lengths(tmp_path):
    """The spec's example: correct lengths [1000, 1500, 2000, 3000, 5000] give B = 2000 at
    rho 50 and 4200 at rho 90; a wrong sample does not count; a prompt without a correct
    sample has B = inf. The budget is fixed: later samples of the prompt do not move it, and
    a run that reopens the record has it."""
    from posttrain.rollout.prompt_budgets import PromptBudgets

    lengths = [1000, 1500, 2000, 3000, 5000]
    first = [prompted(1.0, n, [1, 2]) for n in lengths] + [prompted(0.0, 9000, [1, 2])]
    first += [prompted(0.0, 10, [3, 4], "h")]
    path = tmp_path / "prompt_budgets.jsonl"
    budgets = PromptBudgets("correct", path)
    assert budgets.budgets(first, 50, step=0).tolist() == [2000.0] * 6 + [float("inf")]
    assert budgets.budgets(first, 90, step=0).tolist() == [4200.0] * 6 + [float("inf")]
    later = [prompted(1.0, 10, [1, 2]), prompted(1.0, 10, [3, 4], "h")]
    assert budgets.budgets(later, 50, step=3).tolist() == [2000.0, float("inf")]
    assert PromptBudgets("correct", path).table == budgets.table


def test_toggle_with_auto_budget_from_config():
    """Toggle's example group r = [1, 1, 1, 0] (mean .75 >= lambda .5) with lengths
    [1800, 2500, 1200, 900]: its own budget is the median correct length, 1800, so phase 0
    keeps [1, 0, 1, 0]; phase 1 (step 1 with m = 1) leaves the rewards."""
    from posttrain.rollout.prompt_budgets import PromptBudgets

    cfg = load_config(None, ["stages=[rl]",
                             "reward.shaping=[{name: toggle, budget: auto, m: 1, lam: 0.5}]"])
    eps = [prompted(r, n, [1, 2]) for r, n in zip([1.0, 1.0, 1.0, 0.0], [1800, 2500, 1200, 900])]
    budgets = PromptBudgets("correct")
    shaped = shape_rewards(eps, cfg.reward.shaping, 0, prompt_budgets=budgets)
    assert [e.reward for e in shaped] == [1.0, 0.0, 1.0, 0.0]
    assert [e.reward for e in shape_rewards(eps, cfg.reward.shaping, 1,
                                            prompt_budgets=budgets)] == [1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ConfigError, match="does not take rho"):
        load_config(None, ["reward.shaping=[{name: toggle, budget: 9, m: 1, lam: 0.5, rho: 9}]"])
    with pytest.raises(ConfigError, match="budget is a token count > 0 or auto"):
        load_config(None, ["reward.shaping=[{name: budget_penalty, budget: some, tau: 1}]"])
    with pytest.raises(ConfigError, match="rho is a percentile"):
        load_config(None, ["reward.shaping=[{name: toggle, budget: auto, m: 1, lam: 0.5, "
                           "rho: 120}]"])


def test_parl_reads_a_swarm_episodes_parts():
    eps = [episode(1.0, 4), episode(0.0, 4), episode(1.0, 4)]
    eps[0].meta["parl"] = {"parallel": 0.5, "finish": 1.0}
    eps[1].meta["parl"] = {"parallel": 1.0, "finish": 0.5}  # the third spawned nothing
    rule = ShapingRule(name="parl", lam1=0.2, lam2=0.1, anneal_steps=4)
    assert [e.reward for e in shape_rewards(eps, [rule], step=2)] == pytest.approx(
        [1.0 + 0.5 * (0.2 * 0.5 + 0.1), 0.5 * (0.2 + 0.1 * 0.5), 1.0])
    takes = "'parl' does not take lam4; it takes: anneal_steps, lam1, lam2, lam3"
    with pytest.raises(ConfigError, match=takes):
        load_config(None, ["reward.shaping=[{name: parl, lam1: 0.1, lam2: 0.1, lam4: 1}]"])


def test_efforts_ask_each_prompt_at_every_level_and_evaluate_at_the_highest():
    """``task.efforts`` (the ``effort`` feature): the task runner's variants are the levels in
    order, held-out tasks carry the highest, generated SFT data a random one each, and reward
    shaping reads the grid."""
    import re

    from posttrain.recipes.run_tasks import RunTasks

    run = RunTasks(load_config("configs/effort.yaml", []))
    problem = run.tasks.sample(1, __import__("random").Random(0))[0]
    assert [v(problem).effort for v in run.variants] == [50, 75, 100]
    assert {t.effort for t in run.eval_tasks} == {100}
    assert run.shaping_inputs == {"effort_grid": [50, 75, 100]}
    data = run.conversations(None, 30, 0.0, "SFT", sft=True)
    levels = {re.match(r"Reasoning Effort: (\d+) ", c[0]["content"]).group(1)
              for c in data.conversations}
    assert levels == {"50", "75", "100"}
    plain = RunTasks(load_config("configs/quickstart.yaml", []))
    assert plain.variants == () and plain.shaping_inputs == {}
