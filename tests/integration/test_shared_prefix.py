"""Encoding a shared prompt once gives the plain forward's log-probs, entropies and gradients."""

import torch

from posttrain.models import prefix_lengths, sequence_logprobs

# Shared and plain forwards are two float32 computations of the same values in different orders.
# Bounds, relative to the largest value compared: 16 eps32 for a forward value (~8 chained
# float32 reductions through the 2-layer model, head and logsumexp, ~2 eps32 each), 32 eps32 for
# a gradient (forward and backward).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def grouped_batch():
    """Rows 0, 2, 3 share prompt "a" (5 tokens), rows 1, 4 prompt "b" (7); row 5 has its own;
    row 6 trains nothing (all of it is prompt)."""
    g = torch.Generator().manual_seed(0)
    prompts = {k: torch.randint(5, 200, (n,), generator=g)
               for k, n in {"a": 5, "b": 7, "c": 3, "d": 6}.items()}
    rows = [("a", 6), ("b", 4), ("a", 9), ("a", 2), ("b", 7), ("c", 5), ("d", 0)]
    t = max(len(prompts[k]) + c for k, c in rows)
    ids = torch.zeros((len(rows), t), dtype=torch.long)
    attn = torch.zeros((len(rows), t), dtype=torch.long)
    mask = torch.zeros((len(rows), t))
    for i, (k, c) in enumerate(rows):
        p = len(prompts[k])
        ids[i, :p] = prompts[k]
        ids[i, p : p + c] = torch.randint(5, 200, (c,), generator=g)
        attn[i, : p + c] = 1
        mask[i, p : p + c] = 1
    return ids, attn, mask


def test_prefix_lengths_are_the_untrained_lead():
    _, attn, mask = grouped_batch()
    assert prefix_lengths(mask, attn).tolist() == [5, 7, 5, 5, 7, 3, 5]


def test_shared_prefix_equals_plain_forward(model, monkeypatch):
    ids, attn, mask = grouped_batch()
    suffix_calls = []
    decoder = model.get_decoder()
    original = decoder.forward
    monkeypatch.setattr(decoder, "forward",
                        lambda **kw: suffix_calls.append("cache" in kw) or original(**kw))
    results = []
    for prefix in (None, prefix_lengths(mask, attn)):
        model.zero_grad()
        lp, ent = sequence_logprobs(model, ids, attn, chunk_size=8, prefix_lens=prefix)
        ((lp * mask).sum() + (ent * attn).sum()).backward()
        results.append((lp, ent, [p.grad.clone() for p in model.parameters()]))
    assert suffix_calls == [False, False, True]  # plain; shared: prefixes, then suffixes
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    valid = attn.bool()
    torch.testing.assert_close(lp1[valid], lp0[valid],
                               atol=16 * EPS32 * float(lp0[valid].abs().max()), rtol=0)
    torch.testing.assert_close(ent1[valid], ent0[valid],
                               atol=16 * EPS32 * float(ent0[valid].abs().max()), rtol=0)
    assert g0[0].abs().sum() > 0
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, atol=32 * EPS32 * float(b.abs().max()), rtol=0)
