"""§2 policy losses: worked examples, gradients, gradcheck."""

import math

import pytest
import torch
from algo_helpers import D

from posttrain.algos import get

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.


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


def run(name, **kw):
    return get("policy_loss", name)(**kw)


def one(x):
    return torch.tensor([x], dtype=D)


def test_gspo_spec_examples():
    lr = torch.tensor([[0.1, -0.3]], dtype=D)
    mask = torch.ones(1, 2, dtype=D)
    for adv, expected in ((1.0, -0.90484), (-1.0, 0.9997)):
        out, _ = run("gspo", logp=lr, old_logp=torch.zeros(1, 2, dtype=D),
                     advantages=torch.full((1, 2), adv, dtype=D), mask=mask)
        torch.testing.assert_close(out, torch.full((1, 2), expected, dtype=D), rtol=1e-4, atol=0)


def test_gspo_token_variant_has_the_same_value_and_per_token_gradients():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(2, 3, generator=g, dtype=D)
    kw = {"old_logp": old, "advantages": torch.ones(2, 3, dtype=D),
          "mask": torch.ones(2, 3, dtype=D), "eps_low": 0.5, "eps_high": 0.5}
    seq_lp = (old + 0.01).requires_grad_(True)
    tok_lp = (old + 0.01).requires_grad_(True)
    a, _ = run("gspo", logp=seq_lp, **kw)
    b, _ = run("gspo", logp=tok_lp, token_level=True, **kw)
    torch.testing.assert_close(a, b)
    a.sum().backward()
    b.sum().backward()
    # sequence level: every token of a row shares the row's gradient; token level: its own
    assert torch.allclose(seq_lp.grad, seq_lp.grad[:, :1].expand(2, 3))
    torch.testing.assert_close(tok_lp.grad.sum(1), seq_lp.grad.sum(1))


def test_cispo_spec_example():
    lp = one(-1.0).requires_grad_(True)
    out, stats = run("cispo", logp=lp, old_logp=one(-1.5), advantages=one(1.0), r_max=1.28)
    out.sum().backward()
    assert out.item() == pytest.approx(1.28) and lp.grad.item() == pytest.approx(-1.28)
    assert stats["clipped"].item() == 1.0


@pytest.mark.parametrize("rho,expected", [(2.0, -1.4520), (0.5, -0.45195)])
def test_kimi_k25_spec_examples(rho, expected):
    out, _ = run("kimi_k25", logp=one(math.log(rho)), old_logp=one(0.0), advantages=one(1.0),
                 alpha=0.5, beta=1.5, tau=0.1)
    assert out.item() == pytest.approx(expected, rel=1e-4)


def test_kimi_k25_penalty_symmetry_and_clip_gradients():
    def penalty(rho):
        out, _ = run("kimi_k25", logp=one(math.log(rho)), old_logp=one(0.0),
                     advantages=one(0.0), alpha=0.5, beta=1.5, tau=0.1)
        return out.item()
    assert penalty(2.0) == pytest.approx(penalty(0.5)) == pytest.approx(0.048045, rel=1e-4)
    assert penalty(1.0) == 0.0
    lp = one(math.log(2.0)).requires_grad_(True)  # outside [alpha, beta]: only the penalty
    out, _ = run("kimi_k25", logp=lp, old_logp=one(0.0), advantages=one(1.0), alpha=0.5,
                 beta=1.5, tau=0.1)
    out.backward()
    assert lp.grad.item() == pytest.approx(2 * 0.1 * math.log(2.0))
    lp2 = one(math.log(2.0)).requires_grad_(True)
    out, _ = run("kimi_k25", logp=lp2, old_logp=one(0.0), advantages=one(1.0), alpha=0.5,
                 beta=1.5, tau=0.1, detach_clip=True)
    out.backward()
    assert lp2.grad.item() == pytest.approx(-1.5 + 2 * 0.1 * math.log(2.0))


def test_mimo_is_pg_spec_example():
    from posttrain.algos import StepNorm
    w = torch.tensor([[1.0, 1.2, 3.0]], dtype=D)
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=D)
    out, stats = run("mimo_is_pg", logp=lp, old_logp=lp - w.log(), advantages=torch.ones(1, 3,
                     dtype=D), is_low=0.5, is_high=2.0)
    mask = torch.ones(1, 3, dtype=D)
    total = get("aggregation", "token_mean")(loss=out, mask=mask, norm=StepNorm.from_mask(mask))
    assert total.item() == pytest.approx(1.1333, rel=1e-4)
    assert stats["clipped"].tolist() == [[0.0, 0.0, 1.0]]


@pytest.mark.parametrize("adv,pi_old,expected", [(-1, 0.1, -0.42857), (1, 0.1, 1.0),
                                                 (-1, 0.8, -0.375)])
def test_gbpo_spec_examples(adv, pi_old, expected):
    lp = one(math.log(0.3)).requires_grad_(True)
    out, _ = run("gbpo", logp=lp, old_logp=one(math.log(pi_old)), advantages=one(adv))
    out.backward()
    assert -out.item() == pytest.approx(expected, rel=1e-4)
    assert -lp.grad.item() == pytest.approx(expected, rel=1e-4)  # d o / d log pi = o


def test_ecpo_spec_example():
    lp = one(math.log(0.5)).requires_grad_(True)
    out, _ = run("ecpo", logp=lp, old_logp=one(math.log(0.1)), advantages=one(-1.0), eps=0.2,
                 delta=0.1)
    out.backward()
    assert -out.item() == pytest.approx(-1.3, rel=1e-4)
    assert -lp.grad.item() == pytest.approx(-1.3, rel=1e-4)  # plain PPO: -5
    plain, _ = ppo(5.0, -1.0)
    assert -plain == pytest.approx(-5.0)


@pytest.mark.parametrize("rho,adv,expected", [(1.0, 1, -2.0), (1.5, 1, -2.4898),
                                              (1.5, -1, 2.3936)])
def test_sapo_spec_examples(rho, adv, expected):
    out, _ = run("sapo", logp=one(math.log(rho)), old_logp=one(0.0), advantages=one(adv))
    assert out.item() == pytest.approx(expected, rel=1e-4)


def test_sapo_keeps_its_taus_in_the_run_dtype():
    """At rho = 1 the gate is 2 / tau: in float64 exactly 2 / 1.05 (a float32 tau made it
    1.0499999523, and a group whose advantages cancel summed to 9.1e-8, not 0)."""
    adv = torch.tensor([-1.0, 1.0, -0.5, 0.5], dtype=torch.float64)
    lp = torch.zeros(4, dtype=torch.float64)
    out, _ = run("sapo", logp=lp, old_logp=lp, advantages=adv, tau_pos=1.05, tau_neg=1.05)
    assert out.dtype == torch.float64
    assert out[0].item() == 2 / 1.05 and out.sum().item() == 0.0


def test_reinforce_spec_example():
    lp = one(-2.0).requires_grad_(True)
    out, _ = run("reinforce", logp=lp, advantages=one(0.5))
    out.backward()
    assert out.item() == 1.0 and lp.grad.item() == -0.5


@pytest.mark.parametrize("v,v_old,ret,expected", [(1.0, 0.5, 0.0, 0.5), (0.2, 0.5, 1.0, 0.32)])
def test_value_clip_spec_examples(v, v_old, ret, expected):
    out, _ = run("value_clip", values=one(v), old_values=one(v_old), returns=one(ret))
    assert out.item() == pytest.approx(expected)


def test_entropy_bonus_and_adaptive_controller():
    from posttrain.algos import AdaptiveEntropyCoef
    out, _ = run("entropy_bonus", entropy=one(2.0), coef=0.1)
    assert out.item() == pytest.approx(-0.2)
    ctl = AdaptiveEntropyCoef(target=0.2, delta=0.005)
    applied = [ctl.step(e) for e in (0.1, 0.1, 0.3, 0.1)]
    assert applied == pytest.approx([0.005, 0.01, 0.0, 0.015])


GRADCHECK = {
    "ppo_clip": {"dual_clip": 3.0}, "gspo": {"eps_low": 0.1, "eps_high": 0.1},
    "ecpo": {}, "sapo": {}, "reinforce": {}, "kimi_k25": {"alpha": 0.8, "beta": 1.2, "tau": 0.1},
}
# losses with a stop-gradient on the ratio: checked with the ratio held fixed (old_logp moves
# with logp), which is the function their gradient is the derivative of
FROZEN_RATIO = {"cispo": {"r_max": 1.2}, "mimo_is_pg": {"is_low": 0.7, "is_high": 1.3},
                "kimi_k25": {"alpha": 0.8, "beta": 1.2, "tau": 0.0, "detach_clip": True}}


def gradcheck_inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=g, dtype=D) - 0.5
    adv = torch.randn(3, 4, generator=g, dtype=D)
    lp = (old + 0.2 * torch.randn(3, 4, generator=g, dtype=D)).requires_grad_(True)
    return old, adv, lp


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck(name):
    import inspect
    old, adv, lp = gradcheck_inputs()
    fn = get("policy_loss", name)
    params = inspect.signature(fn).parameters
    kw = {"advantages": adv, **GRADCHECK[name]}
    if "old_logp" in params:
        kw["old_logp"] = old
    if "mask" in params:
        kw["mask"] = torch.ones(3, 4, dtype=D)
    assert torch.autograd.gradcheck(lambda x: fn(logp=x, **kw)[0], (lp,))


@pytest.mark.parametrize("name", sorted(FROZEN_RATIO))
def test_gradcheck_with_the_stopped_ratio_held_fixed(name):
    old, adv, lp = gradcheck_inputs()
    x0 = lp.detach().clone()
    fn = get("policy_loss", name)
    assert torch.autograd.gradcheck(
        lambda x: fn(logp=x, old_logp=old + x.detach() - x0, advantages=adv,
                     **FROZEN_RATIO[name])[0], (lp,))


def test_gbpo_gradient_is_the_spec_formula():
    old, adv, lp = gradcheck_inputs(seed=4)
    out, _ = get("policy_loss", "gbpo")(logp=lp, old_logp=old, advantages=adv)
    out.sum().backward()
    pi, pi_old = lp.detach().exp(), old.exp()
    denom = torch.maximum(pi_old, torch.where(adv >= 0, pi, 1 - pi))
    torch.testing.assert_close(-lp.grad, pi / denom * adv)  # d o / d log pi = pi / pi' A


def test_gradcheck_value_clip_and_entropy_bonus():
    g = torch.Generator().manual_seed(2)
    v = torch.randn(5, generator=g, dtype=D, requires_grad=True)
    old, ret = torch.randn(5, generator=g, dtype=D), torch.randn(5, generator=g, dtype=D)
    assert torch.autograd.gradcheck(
        lambda x: get("policy_loss", "value_clip")(values=x, old_values=old, returns=ret)[0], (v,))
    h = torch.rand(5, generator=g, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: get("policy_loss", "entropy_bonus")(entropy=x, coef=0.3)[0], (h,))
