"""How the trainer's RL loss combines the catalogue: off-policy weights, opsm, KL placement."""

import pytest
import torch

from posttrain.algos import StepNorm, get
from posttrain.config import ActorConfig, KLConfig, OffPolicyConfig
from posttrain.train import RLTokens, rl_loss

D = torch.float64


def tokens(behaviour_shift=0.0, adv=1.0):
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 3, generator=g, dtype=D) - 0.2).requires_grad_(True)
    old = logp.detach().clone()
    mask = torch.ones(2, 3, dtype=D)
    return RLTokens(logp, None, old, torch.full((2, 3), adv, dtype=D), mask,
                    behaviour_logp=old - behaviour_shift, ref_logp=old - 0.5)


def test_correction_weights_scale_the_policy_term():
    t = tokens(behaviour_shift=0.3)  # old - behaviour = 0.3: ratio e^0.3 = 1.35
    norm = StepNorm.from_mask(t.mask)
    plain, _ = rl_loss(t, norm, ActorConfig())
    weighted, stats = rl_loss(t, norm, ActorConfig(),
                              offpolicy=OffPolicyConfig(correction="tis_token"))
    assert weighted.item() == pytest.approx(plain.item() * torch.exp(torch.tensor(0.3)).item())
    assert stats["is_weight"].item() == pytest.approx(torch.exp(torch.tensor(0.3)).item())
    capped, _ = rl_loss(t, norm, ActorConfig(),
                        offpolicy=OffPolicyConfig(correction="tis_token", bounds=(0.0, 1.2)))
    assert capped.item() == pytest.approx(plain.item() * 1.2)
    assert stats["mismatch"].item() == pytest.approx(0.3)


def test_opsm_drops_drifted_negative_sequences():
    t = tokens(behaviour_shift=-0.4, adv=-1.0)  # behaviour above current: drift 0.4 > delta
    norm = StepNorm.from_mask(t.mask)
    dropped, _ = rl_loss(t, norm, ActorConfig(), offpolicy=OffPolicyConfig(opsm_delta=0.1))
    kept, _ = rl_loss(t, norm, ActorConfig(), offpolicy=OffPolicyConfig(opsm_delta=0.5))
    assert dropped.item() == 0.0 and kept.item() != 0.0


def test_m2po_and_kpop_drop_the_drifted_tokens_from_the_policy_term():
    """Token (0, 0) drifts by 1.0, the others by nothing: M2PO (tau .04: 1/6 > .04) and
    KPop (phi .1) drop it alone; with ``token_mean`` over the step's 6 tokens the loss is the
    plain loss without that token's term."""
    t = tokens()
    t.behaviour_logp = t.old_logp.clone()
    t.behaviour_logp[0, 0] -= 1.0
    norm = StepNorm.from_mask(t.mask)
    per_token, _ = get("policy_loss", "ppo_clip")(logp=t.logp, old_logp=t.old_logp,
                                                  advantages=t.advantages)
    expected = (per_token.sum() - per_token[0, 0]).item() / 6
    for offpolicy in (OffPolicyConfig(m2po_tau=0.04), OffPolicyConfig(kpop_phi=0.1)):
        loss, _ = rl_loss(t, norm, ActorConfig(), offpolicy=offpolicy)
        assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_kl_only_enters_the_loss_when_placed_there():
    t = tokens()
    norm = StepNorm.from_mask(t.mask)
    base, _ = rl_loss(t, norm, ActorConfig())
    in_loss, stats = rl_loss(t, norm, ActorConfig(), kl=KLConfig(coef=0.1, estimator="k1"))
    in_reward, _ = rl_loss(t, norm, ActorConfig(),
                           kl=KLConfig(coef=0.1, estimator="k1", placement="in_reward"))
    k1 = get("kl", "k1")(logp=t.logp, ref_logp=t.ref_logp).mean()
    assert in_loss.item() == pytest.approx(base.item() + 0.1 * k1.item())
    assert stats["ref_kl"].item() == pytest.approx(k1.item())
    assert in_reward.item() == base.item()


def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy():
    t = tokens()
    t.entropy = torch.full((2, 3), 2.0, dtype=D)
    norm = StepNorm.from_mask(t.mask)
    base, _ = rl_loss(t, norm, ActorConfig())
    bonus, stats = rl_loss(t, norm, ActorConfig(), entropy_coef=0.01)
    assert bonus.item() == pytest.approx(base.item() - 0.02)
    assert stats["entropy"].item() == 2.0
