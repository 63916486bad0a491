"""§5 off-policy weights and masks: the spec's examples, truncation and routing contracts."""

import math

import pytest
import torch
from algo_helpers import D, t

from posttrain.algos import get, importance_stats

# rel=1e-4 against a literal: the spec's worked examples are quoted to 5 significant
# figures (rounding <= 5e-5 relative); the float64 arithmetic itself is good to ~1e-15.

RATIOS = t([[0.3, 1.0, 2.5, 6.0]])


def weights(name, ratios=RATIOS, mask=None, **kw):
    m = torch.ones_like(ratios) if mask is None else mask
    return get("offpolicy", name)(old_logp=ratios.log(), behaviour_logp=torch.zeros_like(ratios),
                                  mask=m, **kw)


def close(actual, expected):
    # rtol: the spec's worked examples are quoted to 5 significant figures (rounding <= 5e-5
    # relative; the float64 arithmetic adds ~1e-15); atol: expected zeros are masked or
    # cancelled float64 values (<= ~10 * 2.2e-16), far below it
    torch.testing.assert_close(actual, t(expected), rtol=1e-4, atol=1e-9)


def test_spec_example():
    close(weights("tis_token"), [[0.3, 1, 2, 2]])
    close(weights("mis_token"), [[0, 1, 2.5, 0]])
    close(weights("tis_seq"), [[2, 2, 2, 2]])  # product 4.5, clipped
    close(weights("mis_seq"), RATIOS.tolist())  # geometric mean 1.4565 keeps it
    assert math.prod(RATIOS[0].tolist()) ** 0.25 == pytest.approx(1.4565, rel=1e-4)


def test_masked_tokens_are_ignored_and_weights_carry_no_gradient():
    old = RATIOS.log().requires_grad_(True)
    mask = t([[1, 1, 1, 0]])
    w = get("offpolicy", "mis_seq")(old_logp=old, behaviour_logp=torch.zeros_like(old), mask=mask)
    assert not w.requires_grad
    close(w, [[0.3, 1, 2.5, 0]])  # the 6.0 token is outside the mask
    assert get("offpolicy", "tis_seq")(old_logp=RATIOS.log(), behaviour_logp=torch.zeros(1, 4,
                                       dtype=D), mask=torch.zeros(1, 4, dtype=D)).sum() == 0


def test_importance_stats():
    assert importance_stats(torch.ones(2, 3), torch.ones(2, 3))["ess"] == 1.0
    assert importance_stats(t([[1.0, 0.0]]), t([[1.0, 1.0]]))["ess"] == 0.5


def test_framework_aliases():
    assert get("offpolicy", "icepop") is get("offpolicy", "mis_token")
    assert get("offpolicy", "token_truncate") is get("offpolicy", "tis_token")


def test_staleness_mask_spec_example():
    out = get("offpolicy", "staleness_mask")(versions=torch.tensor([[10, 9, 7, 5]]),
                                             mask=torch.ones(1, 4), current_version=10,
                                             max_off_policy_steps=2)
    assert out.tolist() == [[1, 1, 0, 0]]
    unchanged = get("offpolicy", "staleness_mask")(versions=torch.tensor([[0]]),
                                                   mask=torch.ones(1, 1), current_version=99)
    assert unchanged.tolist() == [[1]]


def test_opsm_spec_example():
    kw = {"behaviour_logp": t([[-1.0, -1.0]]), "logp": t([[-1.5, -1.2]]),
          "mask": torch.ones(1, 2, dtype=D), "delta": 0.1}
    assert get("offpolicy", "opsm")(advantages=t([-1.0]), **kw).sum() == 0
    assert get("offpolicy", "opsm")(advantages=t([1.0]), **kw).sum() == 2
    assert get("offpolicy", "opsm")(advantages=t([-1.0]), **{**kw, "delta": 0.4}).sum() == 2


def test_keep_sampling_mask_spec_example():
    logits = torch.log(t([[0.5, 0.3, 0.15, 0.05]]))
    lp = get("offpolicy", "keep_sampling_mask")(logits=logits, top_p=0.75)
    close(lp.exp(), [[0.625, 0.375, 0, 0]])
    assert lp[0, 1].item() == pytest.approx(-0.98083, rel=1e-4)
    assert torch.log(t(0.3)).item() == pytest.approx(-1.2040, rel=1e-4)  # the raw log-prob


def test_keep_sampling_mask_keeps_the_sampled_token():
    """``keep`` adds a token to S: top-p 0.75 keeps {0, 1}; keeping token 3 as well gives
    S = {0, 1, 3} with mass 0.85, so pi = 0.5/0.85, 0.3/0.85, 0, 0.05/0.85; top-k 1 with
    keep = 2 gives 0.5/0.65 and 0.15/0.65."""
    logits = torch.log(t([[0.5, 0.3, 0.15, 0.05]]))
    lp = get("offpolicy", "keep_sampling_mask")(logits=logits, top_p=0.75, keep=torch.tensor([3]))
    close(lp.exp(), [[0.5 / 0.85, 0.3 / 0.85, 0, 0.05 / 0.85]])
    lp = get("offpolicy", "keep_sampling_mask")(logits=logits, top_k=1, keep=torch.tensor([2]))
    close(lp.exp(), [[0.5 / 0.65, 0, 0.15 / 0.65, 0]])


def test_routing_replay_keeps_router_gradient_and_matches_topk_gating():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 8, generator=g, dtype=D, requires_grad=True)
    own = logits.topk(2, dim=-1).indices
    gates = get("offpolicy", "routing_replay")(router_logits=logits, forced_experts=own)
    probs = torch.softmax(logits, -1).gather(-1, own)
    torch.testing.assert_close(gates, probs / probs.sum(-1, keepdim=True))  # renormalised top-k
    forced = torch.tensor([[0, 7]] * 5)  # the engine's (different) experts
    out = get("offpolicy", "routing_replay")(router_logits=logits, forced_experts=forced)
    out[:, 0].sum().backward()
    assert logits.grad[:, [0, 7]].abs().sum() > 0 and logits.grad[:, 1:7].abs().sum() == 0
