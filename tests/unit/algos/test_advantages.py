"""§1 outcome and critic estimators: the spec's worked examples, edge cases, NaN inputs."""

import math

import pytest
import torch
from algo_helpers import D, one_group, ones, t

from posttrain.algos import get


def adv(name, **kw):
    return get("advantage", name)(**kw)


def seq(name, rewards, groups=None, **kw):
    r = t(rewards)
    g = one_group(len(r)) if groups is None else torch.tensor(groups)
    return adv(name, rewards=r, group_ids=g, mask=ones(len(r)), **kw)[:, 0]


def close(actual, expected):
    # rtol: the spec's worked examples are quoted to 5 significant figures (rounding <= 5e-5
    # relative; the float64 arithmetic adds ~1e-15); atol: expected zeros are masked or
    # cancelled float64 values (<= ~10 * 2.2e-16), far below it
    torch.testing.assert_close(actual, t(expected), rtol=1e-4, atol=1e-9)


class TestGRPO:
    def test_spec_examples(self):
        close(seq("grpo", [1, 0, 0, 0, 0, 0, 0, 0]), [2.4749] + [-0.35355] * 7)
        close(seq("grpo", [2.8, 0.8, 0.8, 0]), [1.4233, -0.25117, -0.25117, -0.92094])

    def test_groups_are_independent_and_broadcast_on_mask(self):
        mask = t([[0, 1, 1], [0, 1, 0], [1, 1, 1], [1, 1, 1]])
        out = adv("grpo", rewards=t([1.0, 0.0, 5.0, 5.0]), group_ids=torch.tensor([7, 7, 3, 3]),
                  mask=mask)
        a = 0.5 / (math.sqrt(0.5) + 1e-6)
        close(out[0], [0, a, a])
        close(out[1], [0, -a, 0])
        assert torch.all(out[2:] == 0)  # all-pass group

    def test_single_sample_group_gives_zero(self):
        assert seq("grpo", [3.0]).item() == 0.0

    def test_nan_reward_raises(self):
        with pytest.raises(ValueError, match="rewards holds NaN"):
            seq("grpo", [1.0, float("nan")])


def test_dr_grpo_and_mean_baseline():
    close(seq("dr_grpo", [1, 0, 0, 0]), [0.75, -0.25, -0.25, -0.25])
    close(seq("mean_baseline", [1, 0, 0, 0]), [0.75, -0.25, -0.25, -0.25])
    assert get("advantage", "k2_5") is get("advantage", "composer") is get("advantage",
                                                                          "mean_baseline")


def test_rloo():
    close(seq("rloo", [1, 0, 0, 0]), [1, -1 / 3, -1 / 3, -1 / 3])
    assert seq("rloo", [1.0]).item() == 0.0
    # the leave-one-out definition, row by row
    r = t([0.3, 1.0, 0.2, 0.9, 0.5])
    loo = torch.stack([r[i] - torch.cat([r[:i], r[i + 1:]]).mean() for i in range(5)])
    close(seq("rloo", r.tolist()), loo.tolist())


def test_reinforce_plus_plus_spec_example():
    mask = t([[1, 1, 0], [1, 1, 1]])
    kl = t([[0.1, 0.2, 0.0], [0.0, 0.0, 0.5]])
    out = adv("reinforce_plus_plus", rewards=t([1, 0]), mask=mask, kl=kl, kl_coef=0.1)
    close(out[mask.bool()], [1.0865, 1.1043, -0.73028, -0.73028, -0.73028])
    assert out[0, 2] == 0


def test_reinforce_plus_plus_needs_two_tokens():
    with pytest.raises(ValueError, match="at least 2 valid tokens"):
        adv("reinforce_plus_plus", rewards=t([1.0]), mask=t([[1.0, 0.0]]))


def test_reinforce_plus_plus_baseline_spec_example():
    mask = t([[1, 1], [1, 0], [1, 0], [1, 0]])
    out = adv("reinforce_plus_plus_baseline", rewards=t([1, 0, 0, 0]), group_ids=one_group(4),
              mask=mask)
    close(out[mask.bool()], [1.0954, 1.0954, -0.73030, -0.73030, -0.73030])


def test_remax():
    out = adv("remax", rewards=t([1, 0]), baseline_rewards=t([0.5, 0.5]), mask=ones(2))
    close(out[:, 0], [0.5, -0.5])


class TestGAE:
    def run(self, gamma, lam=0.95, mask=None, values=(0.5, 0.5, 0.5)):
        m = ones(1, 3) if mask is None else t([mask])
        return adv("gae", rewards=t([1.0]), values=t([values]), mask=m, gamma=gamma, lam=lam)[0]

    def test_spec_examples(self):
        close(self.run(1.0), [0.45125, 0.475, 0.5])
        close(self.run(1.0) + 0.5, [0.95125, 0.975, 1.0])  # value targets A + V
        close(self.run(0.9), [0.27276, 0.3775, 0.5])

    def test_lambda_limits(self):
        v = (0.2, 0.7, 0.4)
        td = self.run(0.9, lam=0.0, values=v)
        close(td, [0 + 0.9 * 0.7 - 0.2, 0 + 0.9 * 0.4 - 0.7, 1 - 0.4])  # TD errors
        mc = self.run(0.9, lam=1.0, values=v)
        close(mc, [0.81 - 0.2, 0.9 - 0.7, 1 - 0.4])  # MC return minus V

    def test_matches_a_plain_loop_with_kl_and_clip(self):
        g = torch.Generator().manual_seed(0)
        values, kl = torch.randn(3, 6, generator=g, dtype=D), torch.randn(3, 6, generator=g,
                                                                           dtype=D)
        mask = t([[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
        rewards = t([2.0, -3.0, 0.5])
        out = adv("gae", rewards=rewards, values=values, mask=mask, kl=kl, kl_coef=0.1,
                  gamma=0.9, lam=0.8, reward_clip=1.0)
        for i in range(3):
            idx = mask[i].nonzero().squeeze(-1).tolist()
            r = [-0.1 * kl[i, j].item() for j in idx]
            r[-1] += max(-1.0, min(1.0, rewards[i].item()))
            last = 0.0
            for k in reversed(range(len(idx))):
                nv = values[i, idx[k + 1]].item() if k + 1 < len(idx) else 0.0
                delta = r[k] + 0.9 * nv - values[i, idx[k]].item()
                last = delta + 0.9 * 0.8 * last
                assert out[i, idx[k]].item() == pytest.approx(last, rel=1e-9, abs=1e-12)


def test_opd_spec_examples():
    kw = {"teacher_logp": t([[-0.5, -2.0]]), "logp": t([[-1.0, -1.0]]), "mask": ones(1, 2)}
    close(adv("opd", **kw)[0], [0.5, -1.0])
    close(adv("opd", clip=0.8, **kw)[0], [0.5, -0.8])
    close(adv("opd", alpha=0.5, orm_advantages=t([1.0]), **kw)[0], [1.0, -0.5])


def test_opd_stops_gradient():
    logp = t([[-1.0, -1.0]]).requires_grad_(True)
    out = adv("opd", teacher_logp=t([[-0.5, -2.0]]), logp=logp, mask=ones(1, 2))
    assert not out.requires_grad


@pytest.mark.parametrize("name", ["dr_grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_nan_inputs_raise(name):
    with pytest.raises(ValueError, match="NaN"):
        seq(name, [0.0, float("nan"), 1.0])
