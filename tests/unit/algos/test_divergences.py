"""§7 distillation: the spec's worked examples, bounds and limits, gradients through the
student only, and the sampled OPD estimator against the full-vocabulary value."""

import pytest
import torch
from algo_helpers import D, ones, t

from posttrain.algos import get, rl_kd_objective

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.

P, Q = t([0.7, 0.2, 0.1]).log(), t([0.5, 0.3, 0.2]).log()


def div(name, p=P, q=Q, **kw):
    return get("divergence", name)(teacher_logp=p, student_logp=q, **kw)


@pytest.mark.parametrize("name,kw,expected", [
    ("forward_kl", {}, 0.085123), ("reverse_kl", {}, 0.092033), ("jsd", {}, 0.021901),
    ("jsd", {"beta": 0.9}, 0.0081848), ("skew_fkl", {}, 0.069578), ("skew_rkl", {}, 0.072828),
    ("tvd", {}, 0.2),
])
def test_spec_examples(name, kw, expected):
    assert div(name, **kw).item() == pytest.approx(expected, rel=1e-4)


def random_pair(seed, shape=(6, 7)):
    g = torch.Generator().manual_seed(seed)
    return (torch.log_softmax(torch.randn(shape, generator=g, dtype=D), -1),
            torch.log_softmax(torch.randn(shape, generator=g, dtype=D), -1))


def test_bounds_and_jsd_limits():
    p, q = random_pair(0)
    assert (div("jsd", p, q) <= torch.log(t(2.0)) + 1e-12).all()
    assert (div("tvd", p, q) <= 1).all() and (div("tvd", p, q) >= 0).all()
    # first-order limits: the remainder is O(beta * max p/q) ~ 1e-5 relative at beta = 1e-6
    # (the float64 cancellation in JSD / beta adds only ~eps64 / beta = 2e-10)
    torch.testing.assert_close(div("jsd", p, q, beta=1e-6) / 1e-6, div("forward_kl", p, q),
                               rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(div("jsd", p, q, beta=1 - 1e-6) / 1e-6, div("reverse_kl", p, q),
                               rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="beta"):
        div("jsd", beta=1.0)


@pytest.mark.parametrize("name", ["forward_kl", "reverse_kl", "jsd", "skew_fkl", "skew_rkl",
                                  "tvd", "full_vocab_rkl"])
def test_gradient_through_student_only_and_gradcheck(name):
    p, q = random_pair(1, (2, 5))
    p.requires_grad_(True)
    q.requires_grad_(True)
    div(name, p, q).sum().backward()
    assert p.grad is None and q.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(lambda x: div(name, p.detach(), x), (q.detach().clone()
                                                                        .requires_grad_(True),))


def test_full_vocab_rkl_spec_example_and_topk():
    p, q = t([0.6, 0.2, 0.15, 0.05]).log(), t([0.4, 0.3, 0.2, 0.1]).log()
    assert div("full_vocab_rkl", p, q).item() == pytest.approx(0.086305, rel=1e-4)
    assert div("full_vocab_rkl", p, q, topk=2).item() == pytest.approx(0.081093, rel=1e-4)
    assert div("full_vocab_rkl", p, q, topk=4).item() == pytest.approx(0.086305, rel=1e-4)
    two = torch.stack([p, t([0.25] * 4).log()])
    mixed = div("full_vocab_rkl", two, q, weights=t([0.5, 0.5]))
    expected = 0.5 * div("reverse_kl", p, q) + 0.5 * div("reverse_kl", two[1], q)
    assert mixed.item() == pytest.approx(expected.item())


def test_multi_teacher_and_gkd_spec_examples():
    assert get("divergence", "multi_teacher")(divergences=t([0.2, 0.4]),
                                              weights=t([0.5, 0.5])).item() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="sum to 1"):
        get("divergence", "multi_teacher")(divergences=t([0.2, 0.4]), weights=t([0.5, 0.6]))
    assert get("divergence", "gkd")(data_divergence=t(0.4), on_policy_divergence=t(0.2),
                                    lmbda=0.5).item() == pytest.approx(0.3)
    assert rl_kd_objective(t(1.0), t(0.3), alpha=0.2).item() == pytest.approx(0.74)


def test_sampled_forms_spec_examples():
    one = ones(1, 1)
    a = get("divergence", "opd_sampled")(teacher_logp=t([[0.7]]).log(), logp=t([[0.5]]).log(),
                                         mask=one)
    assert a.item() == pytest.approx(0.33647, rel=1e-4)
    kw = {"teacher_logp": t([[-0.5, -2.0]]), "logp": t([[-1.0, -1.0]]), "mask": ones(1, 2)}
    torch.testing.assert_close(get("divergence", "opd_clip")(r_max=0.8, **kw), t([[0.5, -0.8]]))
    torch.testing.assert_close(get("divergence", "mopd")(alpha=0.5, orm_advantages=t([1.0]),
                                                         **kw), t([[1.0, -0.5]]))
    r = get("divergence", "self_distill")(teacher_logp=t([[-0.2]]), logp=t([[-1.0]]), mask=one)
    assert r.item() == pytest.approx(0.8)


def test_opd_sampled_estimates_the_reverse_kl_and_its_gradient():
    q_logits = t([0.3, -0.2, 0.9, 0.0]).requires_grad_(True)
    p = torch.log_softmax(t([1.0, 0.5, -1.0, 0.2]), 0)
    q = torch.log_softmax(q_logits, 0)
    adv = get("divergence", "opd_sampled")(teacher_logp=p[None], logp=q[None], mask=ones(1, 4))[0]
    exact = div("reverse_kl", p, q)
    assert (q.exp() * -adv).sum().item() == pytest.approx(exact.item(), rel=1e-12)
    # policy gradient with reward A: E_Q[-A grad log Q] equals grad KL(Q || P)
    pg = torch.autograd.grad((q.exp().detach() * -adv * q).sum(), q_logits, retain_graph=True)[0]
    true = torch.autograd.grad(exact, q_logits)[0]
    torch.testing.assert_close(pg, true)
    # Monte Carlo over sampled tokens converges to the full-vocabulary value
    y = torch.multinomial(q.exp().detach(), 100_000, replacement=True,
                          generator=torch.Generator().manual_seed(0))
    # 100k draws: standard error 0.67% of the value; 0.05 is 7.5 s.e.
    assert (-adv[y]).mean().item() == pytest.approx(exact.item(), rel=0.05)


def test_mtp_self_distill_is_the_masked_token_mean_of_kl_main_to_head():
    main = torch.stack([P, Q, Q])[None].requires_grad_(True)  # [1, T=3, V=3]
    head = torch.stack([Q, P, Q])[None].requires_grad_(True)
    fn = get("divergence", "mtp_self_distill")
    # positions 0 and 1 count: (KL(P||Q) + KL(Q||P)) / 2, the spec example's two directions
    loss = fn(main_logp=main, mtp_logp=head, mask=t([[1.0, 1.0, 0.0]]))
    assert loss.item() == pytest.approx((0.085123 + 0.092033) / 2, rel=1e-4)
    loss.backward()
    assert main.grad is None and head.grad[0, :2].abs().sum() > 0
    assert head.grad[0, 2].abs().sum() == 0  # the masked position sends nothing
    assert fn(main_logp=main, mtp_logp=head, mask=t([[0.0, 0.0, 0.0]])).item() == 0.0
