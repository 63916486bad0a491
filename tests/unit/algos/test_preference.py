"""§8 preference losses on the spec's shared example (h = 3) and their edges."""

import math

import pytest
import torch
from algo_helpers import t

from posttrain.algos import get, kto_reference_point

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.

PAIR = {"chosen_logp": t([-10.0]), "ref_chosen_logp": t([-12.0]), "rejected_logp": t([-15.0]),
        "ref_rejected_logp": t([-14.0])}


def loss(name, **kw):
    return get("preference", name)(**kw).item()


def test_dpo_ipo_r_dpo_spec_examples():
    assert loss("dpo", **PAIR) == pytest.approx(0.55436, rel=1e-4)
    assert loss("ipo", **PAIR) == pytest.approx(4.0)
    assert loss("r_dpo", alpha=0.01, chosen_length=t([100]), rejected_length=t([50]),
                **PAIR) == pytest.approx(0.37110, rel=1e-4)
    assert get("preference", "sigmoid") is get("preference", "dpo")


def test_simpo_spec_example_and_empty_response():
    kw = {"chosen_logp": t([-10.0]), "rejected_logp": t([-12.0])}
    assert loss("simpo", chosen_length=t([5]), rejected_length=t([4]), **kw) == pytest.approx(
        0.20141, rel=1e-4)
    with pytest.raises(ValueError, match="length 0"):
        loss("simpo", chosen_length=t([0]), rejected_length=t([4]), **kw)


def test_kto_spec_example_and_reference_point():
    kw = {"logp": t([-8.0]), "ref_logp": t([-10.0]), "beta": 0.1}  # r = 0.2
    assert loss("kto", desirable=torch.tensor([True]), **kw) == pytest.approx(0.45017, rel=1e-4)
    assert loss("kto", desirable=torch.tensor([False]), **kw) == pytest.approx(0.54983, rel=1e-4)
    z = kto_reference_point(t([-3.0, -5.0]), t([-4.0, -4.0]), beta=0.1)
    assert z.item() == 0.0  # mean log-ratio 0 -> KL estimate clamped at 0
    assert kto_reference_point(t([-3.0]), t([-5.0])).item() == pytest.approx(0.2)


def test_orpo_spec_example():
    out = loss("orpo", chosen_mean_logp=t([math.log(0.5)]),
               rejected_mean_logp=t([math.log(0.25)]), lam=0.1)
    assert out == pytest.approx(0.72192, rel=1e-4)
    ratio = loss("orpo", chosen_mean_logp=t([math.log(0.5)]),
                 rejected_mean_logp=t([math.log(0.25)]), lam=1.0) - math.log(2)
    assert ratio == pytest.approx(0.28768, rel=1e-4)


def test_cpo_spec_example():
    assert loss("cpo", chosen_logp=t([-10.0]), rejected_logp=t([-15.0])) == pytest.approx(
        10.474, rel=1e-4)


@pytest.mark.parametrize("name,extra", [
    ("dpo", {}), ("ipo", {}), ("r_dpo", {"alpha": 0.01, "chosen_length": t([9.0]),
                                        "rejected_length": t([4.0])}),
])
def test_gradcheck_and_nan(name, extra):
    fn = get("preference", name)
    x = t([-10.0, -3.0]).requires_grad_(True)
    other = {"rejected_logp": t([-15.0, -2.0]), "ref_chosen_logp": t([-12.0, -4.0]),
             "ref_rejected_logp": t([-14.0, -2.5]), **extra}
    assert torch.autograd.gradcheck(lambda c: fn(chosen_logp=c, **other), (x,))
    with pytest.raises(ValueError, match="NaN"):
        fn(chosen_logp=t([float("nan"), 0.0]), **other)


def test_gradcheck_reference_free_losses():
    c, r = t([-10.0, -3.0]).requires_grad_(True), t([-12.0, -2.5])
    lengths = {"chosen_length": t([5.0, 3.0]), "rejected_length": t([4.0, 2.0])}
    assert torch.autograd.gradcheck(
        lambda x: get("preference", "simpo")(chosen_logp=x, rejected_logp=r, **lengths), (c,))
    assert torch.autograd.gradcheck(
        lambda x: get("preference", "cpo")(chosen_logp=x, rejected_logp=r), (c,))
    mean_c = t([-0.7, -0.2]).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: get("preference", "orpo")(chosen_mean_logp=x, rejected_mean_logp=t([-1.4, -0.9])),
        (mean_c,))
    lp = t([-8.0, -6.0]).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: get("preference", "kto")(logp=x, ref_logp=t([-10.0, -5.0]),
                                           desirable=torch.tensor([True, False]),
                                           reference_point=0.05), (lp,))
