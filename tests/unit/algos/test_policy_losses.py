"""§2 policy losses: worked examples, gradients, gradcheck."""

import math

import pytest
import torch
from algo_helpers import D

from posttrain.algos import get


def ppo(rho, adv, **hp):
    out, stats = get("policy_loss", "ppo_clip")(
        logp=torch.tensor([math.log(rho)], dtype=D), old_logp=torch.zeros(1, dtype=D),
        advantages=torch.tensor([adv], dtype=D), **hp)
    return out.item(), stats


@pytest.mark.parametrize("rho,adv,hp,expected", [
    (1.3, 1.0, {}, -1.2), (1.3, 1.0, {"eps_high": 0.28}, -1.28), (0.7, -1.0, {}, 0.8),
    (5.0, -1.0, {}, 5.0), (5.0, -1.0, {"dual_clip": 3.0}, 3.0),
])
def test_ppo_clip_spec_examples(rho, adv, hp, expected):
    assert ppo(rho, adv, **hp)[0] == pytest.approx(expected, rel=1e-6)


def test_ppo_clip_zero_advantage_and_clip_higher_cap():
    assert ppo(2.0, 0.0)[0] == 0.0
    # pi_old = 0.01, eps = 0.2: the objective stops growing at pi = 0.012
    assert ppo(0.013 / 0.01, 1.0)[0] == pytest.approx(-0.012 / 0.01)


def test_ppo_clip_stat_and_zero_gradient_when_clipped():
    lp = torch.tensor([math.log(1.5), math.log(1.1)], dtype=D, requires_grad=True)
    out, stats = get("policy_loss", "ppo_clip")(logp=lp, old_logp=torch.zeros(2, dtype=D),
                                                advantages=torch.ones(2, dtype=D))
    out.sum().backward()
    assert stats["clipped"].tolist() == [1.0, 0.0]
    assert lp.grad[0].item() == 0.0
    assert lp.grad[1].item() == pytest.approx(-1.1)  # d(-rho A)/dlogp = -rho


def test_ppo_clip_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        ppo(1.0, 1.0, dual_clip=0.5)


def test_ppo_clip_gradcheck():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 4, generator=g, dtype=D)
    adv = torch.randn(3, 4, generator=g, dtype=D)
    logp = (old + 0.3 * torch.randn(3, 4, generator=g, dtype=D)).requires_grad_(True)
    fn = get("policy_loss", "ppo_clip")
    assert torch.autograd.gradcheck(
        lambda x: fn(logp=x, old_logp=old, advantages=adv, dual_clip=3.0)[0], (logp,))
