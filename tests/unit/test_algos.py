import math

import pytest
import torch

from posttrain.algos import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    Registry,
    StepNorm,
)

D = torch.float64


def ones(b, t=1):
    return torch.ones(b, t, dtype=D)


class TestGRPO:
    grpo = staticmethod(ADVANTAGE_ESTIMATORS.get("grpo"))

    def test_spec_example_one_success(self):
        r = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0], dtype=D)
        adv = self.grpo(r, torch.zeros(8, dtype=torch.long), ones(8))[:, 0]
        expected = torch.tensor([2.4749] + [-0.35355] * 7, dtype=D)
        torch.testing.assert_close(adv, expected, rtol=1e-4, atol=0)

    def test_spec_example_graded(self):
        r = torch.tensor([2.8, 0.8, 0.8, 0.0], dtype=D)
        adv = self.grpo(r, torch.zeros(4, dtype=torch.long), ones(4))[:, 0]
        expected = torch.tensor([1.4233, -0.25117, -0.25117, -0.92094], dtype=D)
        torch.testing.assert_close(adv, expected, rtol=1e-4, atol=0)

    def test_groups_are_independent_and_broadcast_on_mask(self):
        r = torch.tensor([1.0, 0.0, 5.0, 5.0], dtype=D)
        g = torch.tensor([0, 0, 1, 1])
        mask = torch.tensor([[0, 1, 1], [0, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=D)
        adv = self.grpo(r, g, mask)
        a = 0.5 / (math.sqrt(0.5) + 1e-6)
        torch.testing.assert_close(adv[0], torch.tensor([0, a, a], dtype=D))
        torch.testing.assert_close(adv[1], torch.tensor([0, -a, 0], dtype=D))
        assert torch.all(adv[2:] == 0)  # equal rewards -> zero advantage

    def test_group_of_one_gives_zero(self):
        adv = self.grpo(torch.tensor([3.0], dtype=D), torch.zeros(1, dtype=torch.long), ones(1))
        assert adv.item() == 0.0

    def test_nan_reward_raises(self):
        with pytest.raises(ValueError, match="NaN"):
            self.grpo(torch.tensor([1.0, float("nan")]), torch.zeros(2, dtype=torch.long),
                      ones(2))


class TestPPOClip:
    loss = staticmethod(POLICY_LOSSES.get("ppo_clip"))

    def run(self, rho, adv, **hp):
        lp = torch.tensor([math.log(rho)], dtype=D)
        out, stats = self.loss(lp, torch.zeros(1, dtype=D), torch.tensor([adv], dtype=D), **hp)
        return out.item(), stats

    @pytest.mark.parametrize(
        "rho,adv,hp,expected",
        [
            (1.3, 1.0, {}, -1.2),
            (1.3, 1.0, {"eps_high": 0.28}, -1.28),
            (0.7, -1.0, {}, 0.8),
            (5.0, -1.0, {}, 5.0),
            (5.0, -1.0, {"dual_clip": 3.0}, 3.0),
        ],
    )
    def test_spec_examples(self, rho, adv, hp, expected):
        assert self.run(rho, adv, **hp)[0] == pytest.approx(expected, rel=1e-6)

    def test_zero_advantage_zero_loss(self):
        assert self.run(2.0, 0.0)[0] == 0.0

    def test_clip_stat_and_zero_gradient_when_clipped(self):
        lp = torch.tensor([math.log(1.5), math.log(1.1)], dtype=D, requires_grad=True)
        out, stats = self.loss(lp, torch.zeros(2, dtype=D), torch.ones(2, dtype=D))
        out.sum().backward()
        assert stats["clipped"].tolist() == [1.0, 0.0]
        assert lp.grad[0].item() == 0.0
        assert lp.grad[1].item() == pytest.approx(-1.1)  # d(-rho*A)/dlogp = -rho

    def test_dual_clip_must_exceed_one(self):
        with pytest.raises(ValueError, match="dual_clip"):
            self.run(1.0, 1.0, dual_clip=0.5)


class TestAggregation:
    L = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]], dtype=D)
    M = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=D)

    @pytest.mark.parametrize(
        "mode,expected",
        [("token_mean", 2.5), ("seq_mean_token_mean", 3.0), ("seq_mean_token_sum", 5.0),
         ("seq_mean_token_sum_norm", 1.25)],
    )
    def test_spec_example(self, mode, expected):
        norm = StepNorm.from_mask(self.M, max_len=4)
        assert LOSS_AGGREGATIONS.get(mode)(self.L, self.M, norm).item() == pytest.approx(expected)

    @pytest.mark.parametrize("mode", LOSS_AGGREGATIONS.names())
    def test_micro_batch_split_invariance(self, mode):
        norm = StepNorm.from_mask(self.M, max_len=4)
        agg = LOSS_AGGREGATIONS.get(mode)
        whole = agg(self.L, self.M, norm)
        split = agg(self.L[:1], self.M[:1], norm) + agg(self.L[1:], self.M[1:], norm)
        assert split.item() == pytest.approx(whole.item())

    def test_naive_per_micro_batch_mean_differs(self):
        # the trap the spec warns about: averaging micro-batch means gives 3.0, not 2.5
        naive = ((self.L[0] * self.M[0]).sum() / 3 + self.L[1, 0]) / 2
        assert naive.item() == pytest.approx(3.0)

    def test_fully_masked_sequence_excluded_and_empty_is_zero(self):
        m = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]], dtype=D)
        norm = StepNorm.from_mask(m)
        assert norm.num_seqs == 1
        assert LOSS_AGGREGATIONS.get("seq_mean_token_mean")(self.L, m, norm).item() == 1.5
        zero = StepNorm.from_mask(torch.zeros(2, 4, dtype=D))
        for mode in LOSS_AGGREGATIONS.names():
            out = LOSS_AGGREGATIONS.get(mode)(self.L, torch.zeros(2, 4, dtype=D), zero)
            assert out.item() == 0.0 and not torch.isnan(out)


class TestKL:
    lp = torch.tensor([-1.0], dtype=D)
    ref = torch.tensor([-2.0], dtype=D)

    @pytest.mark.parametrize("name,value,grad", [("k1", 1.0, 1.0), ("k2", 0.5, 1.0),
                                                 ("k3", 0.36788, 0.63212)])
    def test_spec_values_and_gradients(self, name, value, grad):
        lp = self.lp.clone().requires_grad_(True)
        kl = KL_ESTIMATORS.get(name)(lp, self.ref)
        kl.sum().backward()
        assert kl.item() == pytest.approx(value, rel=1e-4)
        assert lp.grad.item() == pytest.approx(grad, rel=1e-4)

    def test_delta_plus_one(self):
        lp, ref = torch.tensor([0.0], dtype=D), torch.tensor([1.0], dtype=D)
        assert KL_ESTIMATORS.get("k1")(lp, ref).item() == -1.0
        assert KL_ESTIMATORS.get("k3")(lp, ref).item() == pytest.approx(0.71828, rel=1e-4)

    def test_k3_alias_and_nonnegative(self):
        assert KL_ESTIMATORS.get("low_var_kl") is KL_ESTIMATORS.get("k3")
        x = torch.randn(1000, dtype=D)
        y = torch.randn(1000, dtype=D)
        assert (KL_ESTIMATORS.get("k3")(x, y) >= 0).all()

    def test_k3_is_unbiased_for_reverse_kl(self):
        # E_{y~p}[k3] = KL(p || ref) when logp, ref_logp are the sampled token's log-probs
        g = torch.Generator().manual_seed(0)
        p = torch.softmax(torch.randn(6, generator=g, dtype=D), 0)
        q = torch.softmax(torch.randn(6, generator=g, dtype=D), 0)
        y = torch.multinomial(p, 200_000, replacement=True, generator=g)
        est = KL_ESTIMATORS.get("k3")(p.log()[y], q.log()[y]).mean()
        exact = (p * (p.log() - q.log())).sum()
        assert est.item() == pytest.approx(exact.item(), rel=0.02)


def test_registry_errors_list_known_names():
    reg = Registry("thing")
    reg.register("a", "alias_a")(lambda: 1)
    assert reg.canonical("alias_a") == "a"
    with pytest.raises(KeyError, match="known: a, alias_a"):
        reg.get("b")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(lambda: 2)
