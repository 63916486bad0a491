"""§14's rewards checked against the spec's worked examples and their claims: CURIO's
telescoping sum, the confession's disjoint masks, P-GenRM's pair gradient, the win rate
against a hand count and the kernel reward's anchors."""

import math

import pytest
import torch

from posttrain.algos import get
from posttrain.algos.intrinsic import bayes_belief, curio_potential, discounted_sum

B0 = torch.full((3,), 1 / 3, dtype=torch.float64)


def example_beliefs() -> torch.Tensor:
    b1 = bayes_belief(B0, torch.tensor([0.6, 0.3, 0.1]))
    b2 = bayes_belief(b1, torch.tensor([0.5, 0.25, 0.25]))
    return torch.stack([B0, b1, b2])


def test_bayes_updates_give_the_worked_example_beliefs():
    b = example_beliefs()
    torch.testing.assert_close(b[1], torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64))
    torch.testing.assert_close(b[2], torch.tensor([0.75, 0.1875, 0.0625], dtype=torch.float64))


def test_an_impossible_observation_is_an_error():
    with pytest.raises(ValueError, match="likelihood 0 under every type"):
        bayes_belief(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.7]))


@pytest.mark.parametrize("form,expected", [
    ("log", [0.587787, 0.223144]), ("linear", [0.266667, 0.15]),
    ("entropy", [0.200667, 0.195027]),
])
def test_curio_gives_the_worked_example_rewards(form, expected):
    (rewards,) = get("reward", "curio")(beliefs=[example_beliefs()], true_types=[0], form=form)
    assert rewards.tolist() == pytest.approx(expected, abs=1e-6)


def test_the_discounted_log_form_matches_the_worked_example():
    (rewards,) = get("reward", "curio")(beliefs=[example_beliefs()], true_types=[0], gamma=0.9)
    assert discounted_sum(rewards.tolist(), 0.9) == pytest.approx(0.865590, abs=1e-6)
    assert 0.81 * math.log(0.75) - math.log(1 / 3) == pytest.approx(0.865590, abs=1e-6)


@pytest.mark.parametrize("form", ["linear", "log", "entropy"])
@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_curio_telescopes_for_any_beliefs(form, gamma):
    """The potential-based claim: sum_t gamma^t R_t = gamma^T phi(b_T) - phi(b_0)."""
    g = torch.Generator().manual_seed(0)
    beliefs = [torch.softmax(3 * torch.randn(t + 1, 4, generator=g, dtype=torch.float64), -1)
               for t in (1, 3, 6)]
    types = [0, 2, 3]
    for b, u, r in zip(beliefs, types, get("reward", "curio")(
            beliefs=beliefs, true_types=types, gamma=gamma, form=form)):
        phi = curio_potential(b, u, form)
        assert discounted_sum(r.tolist(), gamma) == pytest.approx(
            gamma ** (len(b) - 1) * float(phi[-1]) - float(phi[0]), abs=1e-12)


def test_the_entropy_form_rewards_a_confident_wrong_belief_and_log_does_not():
    wrong = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [0.02, 0.96, 0.02]], dtype=torch.float64)
    curio = get("reward", "curio")
    assert float(curio(beliefs=[wrong], true_types=[0], form="entropy")[0]) > 0
    assert float(curio(beliefs=[wrong], true_types=[0], form="log")[0]) < 0


def test_the_log_form_clamps_a_zero_belief():
    b = torch.tensor([[0.5, 0.5], [0.0, 1.0]], dtype=torch.float64)
    (r,) = get("reward", "curio")(beliefs=[b], true_types=[0])
    assert float(r) == pytest.approx(math.log(1e-6) - math.log(0.5))


def test_curio_refuses_a_bad_form_or_gamma():
    with pytest.raises(ValueError, match="form must be one of"):
        get("reward", "curio")(beliefs=[example_beliefs()], true_types=[0], form="cube")
    with pytest.raises(ValueError, match="gamma must be in"):
        get("reward", "curio")(beliefs=[example_beliefs()], true_types=[0], gamma=0)


def test_the_kernel_reward_meets_its_anchors():
    t = torch.tensor([2.0, 1.0, 0.5, 0.25, 0.1, 0.5])
    correct = torch.tensor([True, True, True, True, True, False])
    r = get("reward", "kernel_speed")(seconds=t, correct=correct,
                                      expert_seconds=torch.ones(6),
                                      roofline_seconds=torch.full((6,), 0.25))
    assert r.tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 0.0])


def test_the_kernel_reward_refuses_a_roofline_slower_than_the_expert():
    with pytest.raises(ValueError, match="roofline faster than the expert"):
        get("reward", "kernel_speed")(seconds=torch.ones(1), correct=torch.ones(1),
                                      expert_seconds=torch.ones(1),
                                      roofline_seconds=torch.full((1,), 2.0))


def test_a_grade_earns_one_on_the_outcomes_side_of_one_half():
    grades = torch.tensor([0.9, 0.5, 0.49, 0.0, float("nan"), 1.0])
    outcomes = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    r = get("reward", "actor_as_grm")(grades=grades, outcomes=outcomes)
    assert r.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("constant", [0.0, 0.3, 0.5, 1.0])
def test_on_balanced_outcomes_a_constant_grade_earns_exactly_one_half(constant):
    """The claim the balanced grading prompts rest on: only telling right from wrong pays."""
    outcomes = torch.tensor([1.0, 0.0] * 8)
    r = get("reward", "actor_as_grm")(grades=torch.full((16,), constant), outcomes=outcomes)
    assert float(r.mean()) == 0.5


def test_confession_and_answer_tokens_get_their_own_advantages():
    task = get("advantage", "grpo")(rewards=torch.tensor([1.0, 0, 1, 0]),
                                    group_ids=torch.zeros(4), mask=torch.ones(4, 1))
    answer = torch.tensor([[1.0, 1, 0, 0]] * 4)  # two answer tokens, two confession tokens
    conf = torch.tensor([[0.0, 0, 1, 1]] * 4)
    adv = get("advantage", "confession")(
        advantages=task.expand(4, 4) * answer, confession_mask=conf,
        confession_rewards=torch.tensor([0.0, 0, 1, 1]), group_ids=torch.zeros(4),
        rows=torch.arange(4))
    a = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(adv[:, 0], torch.tensor([a, -a, a, -a]), atol=1e-5, rtol=0)
    torch.testing.assert_close(adv[:, 2], torch.tensor([-a, -a, a, a]), atol=1e-5, rtol=0)
    assert not bool((answer * conf).any())  # the masks are disjoint
    torch.testing.assert_close(adv * answer, adv[:, :1] * answer)  # answers untouched


def test_the_pgenrm_pair_loss_and_its_gradient():
    delta = torch.tensor([0.8], dtype=torch.float64, requires_grad=True)
    user = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    loss = get("reward_model", "pgenrm_pair")(delta=delta, user=user, centroid=torch.zeros(1, 2),
                                              prototype=user)
    assert float(loss) == pytest.approx(0.371101, abs=1e-6)
    loss.sum().backward()
    assert float(delta.grad) == pytest.approx(-0.310026, abs=1e-6)
    pulled = get("reward_model", "pgenrm_pair")(
        delta=torch.tensor([0.8]), user=torch.tensor([[1.0, 2.0]]),
        centroid=torch.zeros(1, 2), prototype=torch.tensor([[1.0, 0.0]]), lam_cent=0.1,
        lam_tr=0.5)
    assert float(pulled) == pytest.approx(0.371101 + 0.1 * 5 + 0.5 * 4, abs=1e-5)


def test_the_pgenrm_pair_gradient_is_sigmoid_minus_one():
    delta = torch.randn(8, dtype=torch.float64, requires_grad=True)
    user = torch.randn(8, 3, dtype=torch.float64)
    fn = get("reward_model", "pgenrm_pair")
    fn(delta=delta, user=user, centroid=user, prototype=user).sum().backward()
    torch.testing.assert_close(delta.grad, torch.sigmoid(delta.detach()) - 1)
    assert torch.autograd.gradcheck(
        lambda d: fn(delta=d, user=user, centroid=user, prototype=user), (delta.detach()
                                                                          .requires_grad_(),))


def test_the_win_rate_is_a_hand_count():
    rate = get("metric", "rm_win_rate")(policy_scores=[0.9, 0.2, 0.5, 0.7, 0.1],
                                        reference_scores=[0.1, 0.4, 0.5, 0.6, 0.3])
    assert rate == pytest.approx((1 + 0 + 0.5 + 1 + 0) / 5)
    with pytest.raises(ValueError, match="one reference score per policy score"):
        get("metric", "rm_win_rate")(policy_scores=[1.0], reference_scores=[])
