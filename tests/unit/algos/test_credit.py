"""§1 step/token credit: gigpo, tree_grpo, taco, gar, behaviour_reg."""

import math

import pytest
import torch
from algo_helpers import one_group, ones, t

from posttrain.algos import get, long_success_penalty

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.


def close(actual, expected):
    # rtol: the spec's worked examples are quoted to 5 significant figures (rounding <= 5e-5
    # relative; the float64 arithmetic adds ~1e-15); atol: expected zeros are masked or
    # cancelled float64 values (<= ~10 * 2.2e-16), far below it
    torch.testing.assert_close(actual, t(expected), rtol=1e-4, atol=1e-9)


def test_gigpo_spec_example():
    out = get("advantage", "gigpo")(
        rewards=t([1, 0, 1]), group_ids=one_group(3),
        step_states=[["s0", "s1"], ["s0", "s1"], ["s0", "s4", "s5"]], gamma=0.9)
    close(out[0], [1.2431, 1.2845])
    close(out[1], [-2.3046, -1.8618])
    close(out[2], [1.0615, 0.57735, 0.57735])


def test_gigpo_step_rewards_groups_and_merge():
    gigpo = get("advantage", "gigpo")
    # two prompts: identical state names in different groups never share an anchor group
    out = gigpo(rewards=t([1, 0]), group_ids=torch.tensor([0, 1]),
                step_states=[["s"], ["s"]], gamma=0.9)
    assert all(float(o.abs().sum()) == 0 for o in out)
    # merge_same_action averages returns over identical (state, action) before normalising
    kw = {"rewards": t([1, 0, 1]), "group_ids": one_group(3), "step_states": [["s"]] * 3,
          "step_rewards": [[1.0], [0.0], [0.5]], "gamma": 1.0, "omega": 1.0}
    merged = gigpo(step_actions=[["a"], ["a"], ["b"]], merge_same_action=True, **kw)
    a_e = get("advantage", "grpo")(rewards=t([1, 0, 1]), group_ids=one_group(3), mask=ones(3))
    # actions a (mean 0.5) and b (0.5) tie -> step term 0
    close(torch.cat(merged), a_e[:, 0].tolist())
    with pytest.raises(ValueError, match="step_actions"):
        gigpo(merge_same_action=True, **kw)


def test_tree_grpo_spec_example():
    out = get("advantage", "tree_grpo")(
        rewards=t([1, 0, 1, 0, 0, 1]), tree_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
        group_ids=one_group(6), mask=ones(6))[:, 0]
    close(out, [1.4902, -2.0676, 1.4902, -1.4902, -1.4902, 2.0676])


def test_taco_spec_example():
    def run(p, a):
        return get("advantage", "taco")(advantages=t([a]), old_logp=t([math.log(p)]),
                                        old_entropy=t([1.0]), alpha=1.0, lam=0.5).item()
    assert run(0.01, 2.0) == pytest.approx(2 * 0.51359, rel=1e-4)
    assert run(0.01, -2.0) == -2.0  # negative advantages are never scaled
    assert run(0.5, 2.0) == 2.0
    with pytest.raises(ValueError, match="alpha"):
        get("advantage", "taco")(advantages=t([1.0]), old_logp=t([0.0]), old_entropy=t([0.0]),
                                 alpha=0.0, lam=0.5)


def test_gar_spec_example_and_invariants():
    out = get("advantage", "gar")(rewards=t([1, 1, 1, 0]), group_ids=one_group(4),
                                  mask=ones(4), grader_quality=t([1, 0.6, 0.4, 1]))[:, 0]
    close(out, [0.375, 0.225, 0.150, -0.750])
    assert out.sum().abs() < 1e-12  # zero group sum kept
    assert out[:3].sum().item() == pytest.approx(0.75)  # positive mass kept


def test_gar_leaves_unmixed_groups_and_rejects_bad_quality():
    gar = get("advantage", "gar")
    out = gar(rewards=t([1, 1, 0, 0]), group_ids=torch.tensor([0, 0, 1, 1]), mask=ones(4),
              grader_quality=t([0.5, 1, 1, 1]))[:, 0]
    assert torch.all(out == 0)  # all-pass and all-fail groups
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        gar(rewards=t([1, 0]), group_ids=one_group(2), mask=ones(2), grader_quality=t([1.5, 1]))


def test_behaviour_reg_token_rule():
    reg = get("advantage", "behaviour_reg")
    e = t([[0, 1, 0]])
    close(reg(advantages=torch.full((1, 3), 0.5, dtype=torch.float64), error_mask=e,
              k_err=2.0)[0], [0.5, 0, 0.5])
    close(reg(advantages=torch.full((1, 3), -0.5, dtype=torch.float64), error_mask=e,
              k_err=2.0)[0], [-0.5, -1.0, -0.5])
    close(reg(advantages=t([[0.5, -0.5]]), error_mask=t([[0, 0]]), k_err=2.0, up=0.1,
              down=0.2)[0], [0.55, -0.4])
    with pytest.raises(ValueError, match="k_err"):
        reg(advantages=t([[1.0]]), error_mask=t([[1.0]]), k_err=1.0)


def test_behaviour_reg_reward_rule():
    """The spec's example: R = 1, |y| = 5000 > 4000, c = .2, s_min = .5: a group with success
    .75 gives .8, one with success .25 leaves 1 (the rate is the group's share of R = 1)."""
    rule = long_success_penalty
    kw = {"c_long": 0.2, "l_thr": 4000, "s_min": 0.5}
    rewards = t([1, 1, 1, 0, 1, 0, 0, 0])
    lengths = torch.tensor([5000, 3000, 4001, 9000, 5000, 100, 100, 100])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    close(rule(rewards=rewards, lengths=lengths, group_ids=groups, **kw),
          [0.8, 1, 0.8, 0, 1, 0, 0, 0])
