"""§10 evaluation metrics on the spec's examples (n = 10, c = 3)."""

import math

import pytest

from posttrain.algos import get, standard_error

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.


def metric(name, **kw):
    return get("metric", name)(**kw)


@pytest.mark.parametrize("k,expected", [(1, 0.3), (5, 0.91667), (8, 1.0)])
def test_pass_at_k(k, expected):
    assert metric("pass_at_k", n=[10], c=[3], k=k) == pytest.approx(expected, rel=1e-4)
    exact = 1 - math.comb(7, k) / math.comb(10, k)
    assert metric("pass_at_k", n=[10], c=[3], k=k) == pytest.approx(exact)


@pytest.mark.parametrize("k,expected", [(1, 0.3), (2, 0.066667)])
def test_pass_hat_k(k, expected):
    assert metric("pass_hat_k", n=[10], c=[3], k=k) == pytest.approx(expected, rel=1e-4)


def test_averages_over_tasks_and_rejects_bad_k():
    assert metric("pass_at_k", n=[10, 10], c=[3, 10], k=1) == pytest.approx(0.65)
    with pytest.raises(ValueError, match="k <= n"):
        metric("pass_at_k", n=[4], c=[1], k=5)


def test_mean_and_majority():
    assert metric("mean_at_k", scores=[[1, 0, 1, 1]]) == 0.75
    assert metric("maj_at_k", answers=[[5, 3, 5, 2]], gold=[5]) == 1.0
    assert metric("maj_at_k", answers=[[3, 5, 5, 3]], gold=[5]) == 0.0  # tie: first seen wins
    assert metric("maj_at_k", answers=[[None, None, 4]], gold=[4]) == 1.0


def test_standard_error_spec_example():
    assert standard_error(0.4667, 30) == pytest.approx(0.091084, rel=1e-4)
