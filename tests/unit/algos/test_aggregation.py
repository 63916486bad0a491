"""§3 loss aggregation: the spec example and split invariance with step-global normalisers."""

import pytest
import torch
from algo_helpers import D

from posttrain.algos import StepNorm, get, names

L = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]], dtype=D)
M = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=D)


def agg(mode, loss, mask, norm):
    return get("aggregation", mode)(loss=loss, mask=mask, norm=norm)


@pytest.mark.parametrize("mode,expected", [
    ("token_mean", 2.5), ("seq_mean_token_mean", 3.0), ("seq_mean_token_sum", 5.0),
    ("seq_mean_token_sum_norm", 1.25), ("token_sum", 10.0),  # 1 + 2 + 3 + 4
])
def test_spec_example(mode, expected):
    assert agg(mode, L, M, StepNorm.from_mask(M, max_len=4)).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", names("aggregation"))
def test_any_split_gives_the_same_gradient(mode):
    g = torch.Generator().manual_seed(1)
    loss = torch.randn(6, 5, generator=g, dtype=D, requires_grad=True)
    mask = (torch.rand(6, 5, generator=g) > 0.3).to(D)
    mask[2] = 0  # a fully masked sequence
    norm = StepNorm.from_mask(mask, max_len=5)
    agg(mode, loss, mask, norm).backward()
    whole = loss.grad.clone()
    for split in ([2, 4], [1, 1, 4], [5, 1]):
        loss.grad = None
        start = 0
        for size in split:  # gradient accumulation over micro-batches
            sl = slice(start, start + size)
            agg(mode, loss[sl], mask[sl], norm).backward()
            start += size
        torch.testing.assert_close(loss.grad, whole)


def test_naive_per_micro_batch_mean_differs():
    # the trap the spec warns about: averaging micro-batch means gives 3.0, not 2.5
    naive = ((L[0] * M[0]).sum() / 3 + L[1, 0]) / 2
    assert naive.item() == pytest.approx(3.0)


def test_fully_masked_sequence_excluded_and_empty_is_zero():
    m = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]], dtype=D)
    norm = StepNorm.from_mask(m)
    assert norm.num_seqs == 1
    assert agg("seq_mean_token_mean", L, m, norm).item() == 1.5
    zero = StepNorm.from_mask(torch.zeros(2, 4, dtype=D))
    for mode in names("aggregation"):
        out = agg(mode, L, torch.zeros(2, 4, dtype=D), zero)
        assert out.item() == 0.0 and not torch.isnan(out)


def test_framework_spellings():
    assert get("aggregation", "seq-mean-token-sum-norm") is get("aggregation", "dr_grpo")
    assert get("aggregation", "token-mean") is get("aggregation", "dapo")
