"""Sequence packing: several conversations a row with attention isolated between them give the
unpacked batch's per-token log-probs, loss and gradients."""

import copy
import random

import pytest
import torch

from posttrain.algos import StepNorm
from posttrain.data.conversations import conversation_segment
from posttrain.envs import ArithmeticTasks
from posttrain.models import sequence_logprobs, token_distributions
from posttrain.train.losses import sft_loss
from posttrain.types import Batch, Episode

TASKS = ArithmeticTasks(("+", "-"), 2)
# Packed and unpacked rows are two float32 computations of the same values in different orders.
# Bounds, relative to the largest value compared: 16 eps32 for a forward value (~8 chained
# float32 reductions through the 2-layer model, head and logsumexp, ~2 eps32 each), 32 eps32 for
# a gradient (forward and backward).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def segments(tokenizer, n=7):
    rng = random.Random(0)
    convs = [TASKS.sft_conversation(p, 0.5, rng) for p in TASKS.sample(n, rng)]
    convs[0] = [{"role": "system", "content": "Be brief."}, *convs[0]]  # unequal lengths
    return [conversation_segment(tokenizer, c) for c in convs]


def test_packing_layout(tokenizer):
    segs = segments(tokenizer)
    longest = max(len(s.token_ids) for s in segs)
    batch = Batch.packed(segs, 2 * longest, tokenizer.pad_token_id)
    assert len(batch) < len(segs) and batch.input_ids.shape[1] <= 2 * longest
    assert int((batch.attention_mask > 1).sum()) > 0
    assert int((batch.attention_mask > 0).sum()) == sum(len(s.token_ids) for s in segs)
    assert float(batch.loss_mask.sum()) == sum(sum(s.loss_mask) for s in segs)
    packed = sorted(tuple(batch.input_ids[r][batch.attention_mask[r] == k].tolist())
                    for r in range(len(batch)) for k in range(1, 8)
                    if (batch.attention_mask[r] == k).any())
    assert packed == sorted(tuple(s.token_ids) for s in segs)  # every sample once, in one piece


def loss_and_grads(model, batch):
    model.zero_grad()
    logp, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, with_entropy=False)
    loss = sft_loss(logp, batch.loss_mask, StepNorm.from_mask(batch.loss_mask))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_packed_and_unpacked_give_the_same_loss_and_gradients(model, tokenizer):
    segs = segments(tokenizer)
    plain = Batch.from_episodes([Episode([s]) for s in segs], tokenizer.pad_token_id)
    packed = Batch.packed(segs, 3 * max(len(s.token_ids) for s in segs), tokenizer.pad_token_id)
    loss_a, grads_a = loss_and_grads(model, plain)
    loss_b, grads_b = loss_and_grads(copy.deepcopy(model), packed)
    assert loss_a == pytest.approx(float(loss_b), rel=16 * EPS32)  # a mean of -log-probs > 0
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, atol=32 * EPS32 * float(b.abs().max()), rtol=0)


def test_packing_without_isolation_would_differ(model, tokenizer):
    """The check above can fail: the same packed rows seen as one sequence each (no
    isolation) change the loss."""
    segs = segments(tokenizer)
    packed = Batch.packed(segs, 3 * max(len(s.token_ids) for s in segs), tokenizer.pad_token_id)
    plain = Batch.from_episodes([Episode([s]) for s in segs], tokenizer.pad_token_id)
    leaky = packed.replace(attention_mask=(packed.attention_mask > 0).long())
    assert abs(float(loss_and_grads(model, leaky)[0]) - float(loss_and_grads(model, plain)[0])
               ) > 1e-3


def test_packed_distributions_match_per_sample(model, tokenizer):
    segs = segments(tokenizer, 4)
    plain = Batch.from_episodes([Episode([s]) for s in segs], tokenizer.pad_token_id)
    packed = Batch.packed(segs, 10_000, tokenizer.pad_token_id)
    assert len(packed) == 1
    with torch.no_grad():
        a = token_distributions(model, plain.input_ids, plain.attention_mask, plain.loss_mask)
        b = token_distributions(model, packed.input_ids, packed.attention_mask,
                                packed.loss_mask)
    # packing orders samples longest first; compare as multisets of rows
    key = lambda t: t.sum(-1)  # noqa: E731
    torch.testing.assert_close(a[key(a).argsort()], b[key(b).argsort()],
                               atol=16 * EPS32 * float(a.abs().max()), rtol=0)


def test_sft_with_packing_reports_the_unpacked_loss(model, tokenizer, tmp_path):
    import json

    from posttrain.config import OptimConfig, SFTConfig
    from posttrain.data import ChatData
    from posttrain.recipes.sft import run_sft
    from posttrain.reporting import Reporter
    from posttrain.train import Trainer

    rng = random.Random(1)
    data = ChatData([TASKS.sft_conversation(p, 0.5, rng) for p in TASKS.sample(16, rng)])
    losses = []
    for pack in (None, 200):
        cfg = SFTConfig(steps=1, batch_size=16, log_every=1, pack_tokens=pack,
                        optim=OptimConfig(lr=1e-3))
        out = tmp_path / str(pack)
        run_sft(Trainer(copy.deepcopy(model), cfg.optim, 1), tokenizer, data, cfg,
                Reporter(out, quiet=True))
        losses.append(json.loads(open(out / "metrics.jsonl").readline())["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=16 * EPS32)  # a mean of -log-probs > 0
