"""§6 length/effort shaping and dynamic sampling: the spec's examples and edges."""

import math

import pytest
import torch
from algo_helpers import t

from posttrain.algos import get, toggle_budget
from posttrain.features.effort.task import effort_system_prompt

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.


def close(actual, expected):
    # rtol: the spec's worked examples are quoted to 5 significant figures (rounding <= 5e-5
    # relative; the float64 arithmetic adds ~1e-15); atol: expected zeros are masked or
    # cancelled float64 values (<= ~10 * 2.2e-16), far below it
    torch.testing.assert_close(actual, t(expected), rtol=1e-4, atol=1e-9)


def test_dapo_overlong_spec_example():
    out = get("shaping", "dapo_overlong")(lengths=torch.tensor([6, 8, 10, 11]), max_length=10,
                                          cache_length=4)
    close(out, [0, -0.5, -1, -1])
    with pytest.raises(ValueError, match="cache_length"):
        get("shaping", "dapo_overlong")(lengths=torch.tensor([1]), max_length=4, cache_length=5)


def test_effort_length_penalty_spec_example():
    out = get("shaping", "effort_length_penalty")(
        lengths=torch.tensor([6000, 6000, 6000]), efforts=torch.tensor([50, 75, 100]),
        effort_grid=[50, 75, 100], k_p=1.0, lam=1.0, c_max=0.5, l_norm=8000)
    close(out, [-0.5, -0.27591, -0.10150])
    assert effort_system_prompt(75).startswith("Reasoning Effort: 75 (range 1--100")


def test_budget_penalty_spec_example():
    kw = {"rewards": t([1.0, 1.0]), "lengths": torch.tensor([1400, 1600]),
          "budgets": t([1000, 1000]), "tau": 1.5}
    close(get("shaping", "budget_penalty")(**kw), [1, -1])
    close(get("shaping", "budget_penalty")(mode="add", **kw), [1, 0])


def test_toggle_budget_and_phases_spec_example():
    lengths = [1000, 1500, 2000, 3000, 5000]
    assert toggle_budget(lengths, 50) == 2000 and toggle_budget(lengths, 90) == 4200
    assert toggle_budget([], 50) == math.inf
    kw = {"rewards": t([1, 1, 1, 0]), "lengths": torch.tensor([1800, 2500, 1200, 900]),
          "group_ids": torch.zeros(4, dtype=torch.long), "budgets": t([2000] * 4), "m": 10,
          "lam": 0.5}
    close(get("shaping", "toggle")(step=3, **kw), [1, 0, 1, 0])  # phase 0, mastered group
    close(get("shaping", "toggle")(step=13, **kw), [1, 1, 1, 0])  # phase 1
    close(get("shaping", "toggle")(step=3, **{**kw, "lam": 0.9}), [1, 1, 1, 0])  # not mastered


def test_concave_length_penalty_spec_example_and_shape():
    fn = get("shaping", "concave_length_penalty")
    x = t([100.0]).requires_grad_(True)
    out = fn(x=x, k=0.01, q=0.5)
    out.backward()
    assert out.item() == pytest.approx(82.843, rel=1e-4)
    assert x.grad.item() == pytest.approx(0.70711, rel=1e-4)  # C'(x) = (1 + kx)^-q
    assert fn(x=t([100.0]), k=0.01, q=1.0).item() == pytest.approx(69.315, rel=1e-4)
    assert fn(x=t([100.0]), k=0.01, q=0.0).item() == pytest.approx(100.0)
    assert fn(x=t([100.0]), k=0.0, q=0.5).item() == 100.0
    xs = torch.linspace(0, 500, 50, dtype=torch.float64)
    c = fn(x=xs, k=0.01, q=0.5)
    assert (c.diff() > 0).all() and (c.diff().diff() < 0).all()  # increasing, concave


def test_dynamic_sampling_spec_example():
    keep = get("shaping", "dynamic_sampling")(rewards=t([1, 1, 1, 0, 0, 0, 1, 0, 1]),
                                              group_ids=torch.tensor([0] * 3 + [1] * 3 + [2] * 3))
    assert keep.tolist() == [False] * 6 + [True] * 3


def test_parl_anneals_its_auxiliary_terms_to_zero():
    parl = get("shaping", "parl")
    args = dict(rewards=t([1.0, 0.0]), parallel=t([0.5, 1.0]), finish=t([1.0, 0.0]),
                lam1=0.2, lam2=0.1, anneal_steps=10)
    close(parl(**args, step=0), [0.2 * 0.5 + 0.1 * 1.0 + 1.0, 0.2 * 1.0])  # 1.2, 0.2
    close(parl(**args, step=5), [1.1, 0.1])  # half of each auxiliary term
    close(parl(**args, step=10), [1.0, 0.0])
    close(parl(**args, step=25), [1.0, 0.0])
    close(parl(**{**args, "anneal_steps": 0}, step=25), [1.2, 0.2])  # never annealed
    close(parl(**args, step=0, lam3=2.0), [2.2, 0.2])
    with pytest.raises(ValueError, match="anneal_steps"):
        parl(**{**args, "anneal_steps": -1}, step=0)
