"""The estimators peers added (issue 39; docs/estimators.md), against hand-worked examples:
``clip_cov`` and ``kl_cov`` (covariance-selected tokens), ``top_entropy`` (the 80/20 rule),
``maxrl``, and the mismatch masks ``m2po`` and ``kpop``.

The covariance example: one row, A = (3, -1, 2, -1), log pi = (0, -4, -1, -3), log pi_old = log pi -
0.1 (rho = e^0.1 on every token, inside any clip band). Means: A 0.75, log pi -2, so
Cov = (2.25 * 2, -1.75 * -2, 1.25 * 1, -1.75 * -1) = (4.5, 3.5, 1.25, 1.75)."""

import math

import pytest
import torch
from algo_helpers import D

from posttrain.algos import get
from posttrain.algos.objectives.cov_losses import token_covariance

ADV = torch.tensor([[3.0, -1.0, 2.0, -1.0]], dtype=D)
LOGP = torch.tensor([[0.0, -4.0, -1.0, -3.0]], dtype=D)
OLD = LOGP - 0.1
MASK = torch.ones(1, 4, dtype=D)
RHO = math.exp(0.1)


def test_token_covariance_is_the_hand_product():
    torch.testing.assert_close(token_covariance(LOGP, ADV, MASK),
                               torch.tensor([[4.5, 3.5, 1.25, 1.75]], dtype=D))
    padded = token_covariance(torch.cat([LOGP, torch.tensor([[9.0]], dtype=D)], 1),
                              torch.cat([ADV, torch.tensor([[9.0]], dtype=D)], 1),
                              torch.cat([MASK, torch.zeros(1, 1, dtype=D)], 1))
    torch.testing.assert_close(padded, torch.tensor([[4.5, 3.5, 1.25, 1.75, 0.0]], dtype=D))
    one_sequence = token_covariance(LOGP, torch.full_like(ADV, 2.0), MASK)  # GRPO's: A_t = A
    assert one_sequence.abs().max() == 0  # why one sequence a micro-batch is refused


def clip_cov(logp=LOGP, old=OLD, **hp):
    lp = logp.clone().requires_grad_(True)
    loss, stats = get("policy_loss", "clip_cov")(logp=lp, old_logp=old, advantages=ADV,
                                                 mask=MASK, **hp)
    loss.sum().backward()
    return loss.detach(), lp.grad, stats


def test_clip_cov_holds_back_the_tokens_in_the_band():
    """Band (3, 5): tokens 0 and 1; ratio 0.5 of 4 tokens is 2: both held back (loss and
    gradient 0), the others keep -A rho."""
    loss, grad, stats = clip_cov(cov_ratio=0.5, cov_low=3.0, cov_high=5.0)
    torch.testing.assert_close(loss, torch.tensor([[0.0, 0.0, -2 * RHO, RHO]], dtype=D))
    assert grad[0, :2].tolist() == [0.0, 0.0] and grad[0, 2:].abs().min() > 0
    assert stats["clipped"].tolist() == [[1.0, 1.0, 0.0, 0.0]]


def test_clip_cov_draws_one_of_the_candidates_the_same_way_for_the_same_batch():
    """ratio 0.25 of 4 is 1 token, drawn among tokens 0 and 1; the draw is a function of the
    batch."""
    first, _, _ = clip_cov(cov_ratio=0.25, cov_low=3.0, cov_high=5.0)
    again, _, _ = clip_cov(cov_ratio=0.25, cov_low=3.0, cov_high=5.0)
    held = [t for t in range(4) if first[0, t] == 0]
    assert len(held) == 1 and held[0] in (0, 1) and torch.equal(first, again)


def test_clip_cov_leaves_tokens_ppo_clipped_out_of_the_draw():
    """Token 0 at rho = 1.5 (A > 0) is clipped by PPO: only token 1 can be held back; token
    0 keeps the clipped loss -1.2 A."""
    old = OLD.clone()
    old[0, 0] = -math.log(1.5)
    loss, _, _ = clip_cov(old=old, cov_ratio=0.5, cov_low=3.0, cov_high=5.0)
    torch.testing.assert_close(loss, torch.tensor([[-3 * 1.2, 0.0, -2 * RHO, RHO]], dtype=D))


def test_clip_cov_without_candidates_is_ppo_clip():
    loss, _, _ = clip_cov(cov_low=10.0, cov_high=20.0)
    ppo, _ = get("policy_loss", "ppo_clip")(logp=LOGP, old_logp=OLD, advantages=ADV)
    torch.testing.assert_close(loss, ppo)


def test_kl_cov_penalises_the_largest_covariance():
    """ratio 0.25: one token, the largest Cov (token 0), gets + |log pi - log pi_old| = 0.1;
    ratio 0.5 adds token 1 (Cov 3.5)."""
    loss, stats = get("policy_loss", "kl_cov")(logp=LOGP, old_logp=OLD, advantages=ADV,
                                               mask=MASK, cov_ratio=0.25)
    expected = torch.tensor([[-3 * RHO + 0.1, RHO, -2 * RHO, RHO]], dtype=D)
    torch.testing.assert_close(loss, expected)
    assert stats["clipped"].tolist() == [[1.0, 0.0, 0.0, 0.0]]
    two, _ = get("policy_loss", "kl_cov")(logp=LOGP, old_logp=OLD, advantages=ADV, mask=MASK,
                                          cov_ratio=0.5, kl_coef=2.0)
    torch.testing.assert_close(two, torch.tensor([[-3 * RHO + 0.2, RHO + 0.2, -2 * RHO, RHO]],
                                                 dtype=D))


def test_at_least_one_token_is_selected_and_none_without_valid_tokens():
    loss, _ = get("policy_loss", "kl_cov")(logp=LOGP, old_logp=OLD, advantages=ADV, mask=MASK)
    assert loss[0, 0] == pytest.approx(-3 * RHO + 0.1)  # floor(2e-4 * 4) = 0 -> 1
    none, _ = get("policy_loss", "kl_cov")(logp=LOGP, old_logp=OLD, advantages=ADV,
                                           mask=torch.zeros(1, 4, dtype=D))
    torch.testing.assert_close(none, -ADV * RHO)


def top_entropy(entropy, mask, rho):
    return get("advantage", "top_entropy")(advantages=torch.ones_like(entropy),
                                           old_entropy=entropy, mask=mask, rho=rho)


def test_top_entropy_keeps_the_tokens_at_or_above_the_quantile():
    """H = (.1, .5, .9, .3, .7), rho = .4: the 0.6 quantile of (.1, .3, .5, .7, .9) at
    position 2.4 is .5 + .4 (.7 - .5) = .58, so tokens 2 and 4 keep A; a padded token does
    not move the quantile; rho = 1 keeps every token."""
    h = torch.tensor([[0.1, 0.5, 0.9, 0.3, 0.7, 5.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=D)
    kept = top_entropy(h, mask, 0.4) * mask
    assert kept.tolist() == [[0.0, 0.0, 1.0, 0.0, 1.0, 0.0]]
    assert (top_entropy(h, mask, 1.0) * mask).tolist() == mask.tolist()
    with pytest.raises(ValueError, match="rho"):
        top_entropy(h, mask, 0.0)


def maxrl(rewards, groups):
    return get("advantage", "maxrl")(rewards=torch.tensor(rewards, dtype=D),
                                      group_ids=torch.tensor(groups),
                                      mask=torch.ones(len(rewards), 1, dtype=D))[:, 0].tolist()


def test_maxrl_weighs_a_pass_by_n_over_k():
    """K of N passing: N/K - 1 on a pass, -1 on a fail; no pass or all passing: 0. Each
    group's advantages sum to 0 (a baseline: no bias)."""
    adv = maxrl([1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1], [0] * 4 + [1] * 4 + [2] * 2 + [3] * 2)
    assert adv == pytest.approx([1, -1, -1, 1, 3, -1, -1, -1, 0, 0, 0, 0], abs=1e-12)
    assert sum(adv[:4]) == pytest.approx(0) and sum(adv[4:8]) == pytest.approx(0)


def test_maxrl_divides_by_any_positive_mean_without_a_floor():
    """Rewards [1e-9, 0, 0]: mean 1e-9/3, so (1e-9 - mean) / mean = 2 and -1, -1 (a floor of
    1e-6 on the mean once gave 0.000667)."""
    assert maxrl([1e-9, 0, 0], [0, 0, 0]) == pytest.approx([2, -1, -1], rel=1e-12)


def mismatch_mask(name, delta, **hp):
    old = torch.tensor([delta], dtype=D)
    return get("offpolicy", name)(old_logp=old, behaviour_logp=torch.zeros_like(old),
                                  mask=torch.ones_like(old), **hp)[0].tolist()


def test_m2po_masks_the_largest_squares_until_the_rest_is_inside_the_budget():
    """log ratios (.5, .1, -.3, 0): squares (.25, .01, .09, 0). Suffix means of the sorted
    squares: .0875, .0333, .005, 0. tau .04 masks token 0; tau .02 tokens 0 and 2; a tau no
    suffix reaches masks all but the smallest."""
    lam = [0.5, 0.1, -0.3, 0.0]
    assert mismatch_mask("m2po", lam, tau=0.04) == [0.0, 1.0, 1.0, 1.0]
    assert mismatch_mask("m2po", lam, tau=0.02) == [0.0, 1.0, 0.0, 1.0]
    assert mismatch_mask("m2po", [0.2, 0.2, 0.2], tau=0.01) == [0.0, 0.0, 1.0]
    assert mismatch_mask("m2po", lam, tau=1.0) == [1.0] * 4


def test_kpop_keeps_tokens_whose_two_way_bernoulli_kl_is_small():
    """p = .5, q = .4: D(p||q) = .5 ln(.5/.4) + .5 ln(.5/.6) = .020411, D(q||p) = .020136; p =
    .9, q = .3: D(p||q) = .9 ln 3 + .1 ln(1/7) = .794163, D(q||p) = .3 ln(1/3) + .7 ln 7 =
    1.032558."""
    old = torch.log(torch.tensor([[0.5, 0.9]], dtype=D))
    behaviour = torch.log(torch.tensor([[0.4, 0.3]], dtype=D))

    def kept(phi):
        return get("offpolicy", "kpop")(old_logp=old, behaviour_logp=behaviour,
                                        mask=torch.ones_like(old), phi=phi)[0].tolist()

    assert kept(0.1) == [1.0, 0.0] and kept(0.0205) == [1.0, 0.0]
    assert kept(0.0203) == [0.0, 0.0] and kept(1.0) == [1.0, 0.0]
    assert kept(1.033) == [1.0, 1.0]
