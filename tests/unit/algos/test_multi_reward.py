"""§1 multi-reward estimators (gdpo, gd2po, dvao) and reward synthesis (grs)."""

import pytest
import torch
from algo_helpers import one_group, ones, t

from posttrain.algos import get


def run(name, columns, **kw):
    r = t(columns).T  # [B, K]
    return get("advantage", name)(rewards=r, group_ids=one_group(r.shape[0]),
                                  mask=ones(r.shape[0]), **kw)[:, 0]


def close(actual, expected):
    # rtol: the spec's worked examples are quoted to 5 significant figures (rounding <= 5e-5
    # relative; the float64 arithmetic adds ~1e-15); atol: expected zeros are masked or
    # cancelled float64 values (<= ~10 * 2.2e-16), far below it
    torch.testing.assert_close(actual, t(expected), rtol=1e-4, atol=1e-9)


def test_gdpo_spec_example():
    close(run("gdpo", [[1, 1, 0, 0], [1, 0, 1, 0]]), [1.2247, 0, 0, -1.2247])
    assert get("advantage", "normalize_then_sum") is get("advantage", "gdpo")


def test_gdpo_constant_reward_contributes_nothing():
    with_constant = run("gdpo", [[1, 1, 0, 0], [3, 3, 3, 3]])
    alone = run("gdpo", [[1, 1, 0, 0]])
    close(with_constant, alone.tolist())


def test_gdpo_normalises_over_the_whole_batch():
    r = t([[1, 0, 1, 0], [1, 1, 0, 0]]).T
    out = get("advantage", "gdpo")(rewards=r, group_ids=torch.tensor([0, 0, 1, 1]),
                                   mask=ones(4))[:, 0]
    assert out.mean().abs() < 1e-12 and out.std().item() == pytest.approx(1.0, rel=1e-4)


GD2PO = [[0.5, 1, 0.5, 0], [1, 1, 1, 0], [0, 1, 0, 0.5]]


def test_gd2po_spec_examples():
    close(run("gd2po", GD2PO, filter="hard"), [0, 0.75758, 0, 0])
    close(run("gd2po", GD2PO, filter="snr", tau=0.8), [0, 1.5152, 0, -1.2318])


def test_gd2po_all_filtered_group_is_zero_and_bad_filter_raises():
    # every row mixes signs -> M_i = 0 -> the whole group is 0
    assert torch.all(run("gd2po", [[1, 0], [0, 1]], filter="hard") == 0)
    with pytest.raises(ValueError, match="filter"):
        run("gd2po", GD2PO, filter="soft")


def test_dvao_spec_example():
    out = run("dvao", [[1, 1, 1, 1, 1, 1, 1, 0], [1, 0, 1, 0, 1, 0, 1, 0]])
    close(out, [0.70377, -0.42226] * 3 + [0.70377, -1.5483])
    plain = run("gdpo", [[1] * 7 + [0], [1, 0] * 4])  # for contrast: not the same thing
    assert not torch.allclose(out, plain)


def test_dvao_closed_form_without_eps_and_all_constant():
    cols = [[1, 1, 1, 1, 1, 1, 1, 0], [1, 0, 1, 0, 1, 0, 1, 0]]
    out = run("dvao", cols, eps=0.0)
    r = t(cols)
    expected = (r - r.mean(dim=1, keepdim=True)).sum(0) / r.std(dim=1).sum()
    close(out, expected.tolist())
    assert torch.all(run("dvao", [[1, 1, 1], [0, 0, 0]]) == 0)


def test_weights_must_match_reward_count():
    with pytest.raises(ValueError, match="2 reward parts but 3 weights"):
        run("gdpo", [[1, 0], [0, 1]], weights=[1, 1, 1])


def test_grs():
    out = get("advantage", "grs")(test_rewards=t([1, 0, 1]), solution_scores=t([0.8, 1, 1]),
                                  behaviour_scores=t([0.5, 1, 0.25]))
    close(out, [0.4, 0.0, 0.25])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        get("advantage", "grs")(test_rewards=t([1]), solution_scores=t([1.5]),
                                behaviour_scores=t([1]))
