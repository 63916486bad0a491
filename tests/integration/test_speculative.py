"""MTP heads and speculative decoding (ALGORITHMS.md §14 ``mtp_self_distill``): the head saved
beside a model that still loads, its self-distillation loss, and a ``TorchEngine`` drafting
with it whose tokens follow the main model's distribution exactly (a chi-square test against
the exact probabilities), whose greedy output is plain decoding's, and whose behaviour
log-probs are the main model's."""

import itertools

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from posttrain.engines import TorchEngine
from posttrain.engines.sampling import processed_logprobs
from posttrain.models.mtp import MTPHead, has_mtp_head, mtp_loss
from posttrain.types import SamplingParams

EPS32 = torch.finfo(torch.float32).eps
PROMPT = [1, 2, 3]


def small_vocab_model(vocab=4, scale=2.5, seed=0):
    """A 2-layer Llama over ``vocab`` tokens, weights scaled up so its distributions are far
    from uniform, and a random MTP head that drafts badly and well by turns."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=64, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    head = MTPHead.for_model(model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
        for p in head.parameters():
            p.add_(torch.randn_like(p))
    return model, head


def distilled(model, head, steps=60):
    """``head`` after ``steps`` of ``mtp_loss`` on random sequences: a draft right often
    enough for greedy decoding to accept some."""
    g = torch.Generator().manual_seed(1)
    optim = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(steps):
        ids = torch.randint(model.config.vocab_size, (16, 12), generator=g)
        ones = torch.ones_like(ids)
        loss = mtp_loss(model, head, ids, ones, ones)
        optim.zero_grad()
        loss.backward()
        optim.step()
    return head


def exact_probabilities(model, sampling, length=3):
    """Every continuation of ``PROMPT`` of ``length`` tokens and its probability under the
    processed distributions of ``sampling``, in float64."""
    out = {}
    with torch.no_grad():
        for seq in itertools.product(range(model.config.vocab_size), repeat=length):
            logits = model(input_ids=torch.tensor([PROMPT + list(seq)])).logits[0].double()
            rows = logits[len(PROMPT) - 1 : len(PROMPT) - 1 + length]
            logp = processed_logprobs(rows, sampling)
            out[seq] = float(logp[torch.arange(length), torch.tensor(seq)].sum().exp())
    return out


def chi_square_p_value(counts, probs, n):
    """The p-value of Pearson's statistic over the cells with probability > 0 (each expected
    count here is at least 30), from the chi-square survival function."""
    cells = [(counts.get(s, 0), n * p) for s, p in probs.items() if p > 0]
    stat = sum((c - e) ** 2 / e for c, e in cells)
    df = torch.tensor((len(cells) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(df, torch.tensor(stat / 2, dtype=torch.float64)))


@pytest.mark.parametrize("k,sampling", [
    (2, SamplingParams(temperature=1.0, max_new_tokens=3, seed=1)),
    (3, SamplingParams(temperature=0.8, top_k=3, max_new_tokens=3, seed=2)),
])
def test_speculative_tokens_follow_the_main_models_distribution(k, sampling):
    model, head = small_vocab_model()
    engine = TorchEngine(model, pad_token_id=0, draft=head, draft_tokens=k)
    n = 20_000
    counts = {}
    for out in engine.generate([PROMPT] * n, sampling):
        counts[tuple(out.token_ids)] = counts.get(tuple(out.token_ids), 0) + 1
    probs = exact_probabilities(model, sampling)
    assert min(p for p in probs.values() if p > 0) * n > 5  # the statistic's usual condition
    assert sum(counts.get(s, 0) for s, p in probs.items() if p == 0) == 0  # never outside
    # false-alarm rate 1e-4 for a correct engine; drafting from q without the acceptance
    # rule would be off by far more (acceptance here is well below 1)
    assert chi_square_p_value(counts, probs, n) > 1e-4
    assert 0.05 < engine.speculative.acceptance_rate < 0.95


def test_greedy_speculative_output_is_plain_decodings():
    model, head = small_vocab_model(vocab=6)
    head = distilled(model, head)
    prompts = [PROMPT, [4, 4, 1, 5], [2], PROMPT]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    eos = TorchEngine(model, pad_token_id=0).generate(prompts, greedy)[0].token_ids[4]
    plain = TorchEngine(model, pad_token_id=0, eos_token_id=eos).generate(prompts, greedy)
    for k in (1, 3):
        engine = TorchEngine(model, pad_token_id=0, eos_token_id=eos, draft=head,
                             draft_tokens=k)
        spec = engine.generate(prompts, greedy)
        assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
        assert [o.finish_reason for o in spec] == [o.finish_reason for o in plain]
        assert all(lp == 0.0 for o in spec for lp in o.logprobs)
        assert engine.speculative.accepted > 0
    assert "stop" in {o.finish_reason for o in plain}  # the stop token ends rows the same way
    # no near tie on the greedy path that float32 rounding could tip (else equality would
    # be luck): every argmax leads the runner-up by far more than the logits' error
    with torch.no_grad():
        for out in plain:
            ids = torch.tensor([out.prompt_ids + out.token_ids])
            top2 = model(input_ids=ids).logits[0, len(out.prompt_ids) - 1 :].topk(2).values
            assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3


def test_behaviour_logprobs_are_the_main_models_and_rows_do_not_depend_on_the_batch():
    model, head = small_vocab_model(vocab=6, seed=1)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    engine = TorchEngine(model, pad_token_id=0, eos_token_id=5, draft=head, draft_tokens=2)
    prompts = [PROMPT, [4, 4, 1], PROMPT, [2]]
    outs = engine.generate(prompts, sampling)
    assert engine.generate(prompts, sampling) == outs  # a pure function of seed and prompt
    seeds = [11, 12, 13, 14]
    batched = engine.generate(prompts, sampling, seeds=seeds)
    for i in range(4):  # each row alone (other prompt lengths, no group) decodes the same
        alone = engine.generate(prompts[i : i + 1], sampling, seeds=seeds[i : i + 1])[0]
        assert alone.token_ids == batched[i].token_ids
    assert len({tuple(o.token_ids) for o in batched}) > 1
    with torch.no_grad():
        for out in outs:
            ids = torch.tensor([out.prompt_ids + out.token_ids])
            logits = model(input_ids=ids).logits[0, len(out.prompt_ids) - 1 : -1]
            want = torch.log_softmax(logits, dim=-1)[torch.arange(len(out.token_ids)),
                                                     torch.tensor(out.token_ids)]
            # the engine's verify forward and this one: two float32 computations of the same
            # log-probs, ~8 chained reductions (as in test_engine.py): 16 eps32 of the largest
            bound = 16 * EPS32 * max(1.0, float(want.abs().max()))
            torch.testing.assert_close(torch.tensor(out.logprobs), want, atol=bound, rtol=0)


def test_a_draft_needs_the_fast_decoder():
    model, head = small_vocab_model()
    with pytest.raises(ValueError, match="Llama-family model on the fast decoder"):
        TorchEngine(model, pad_token_id=0, draft=head, fast=False)
    with pytest.raises(ValueError, match="k >= 1"):
        TorchEngine(model, pad_token_id=0, draft=head, draft_tokens=0)


def test_the_head_saves_beside_a_model_that_still_loads(tmp_path, tiny_dir):
    import shutil

    d = tmp_path / "model"
    shutil.copytree(tiny_dir, d)
    model = AutoModelForCausalLM.from_pretrained(d)
    head = MTPHead.for_model(model)
    assert not has_mtp_head(d)
    head.save(d)
    assert has_mtp_head(d) and not list(d.glob("*.tmp"))
    again = AutoModelForCausalLM.from_pretrained(d)  # the extra files are not its business
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    loaded = MTPHead.load(d)
    x, e = torch.randn(2, model.config.hidden_size), torch.randn(2, model.config.hidden_size)
    assert torch.equal(loaded(x, e), head(x, e))
    with pytest.raises(FileNotFoundError, match="no MTP head"):
        MTPHead.load(tmp_path)


def test_mtp_loss_trains_the_head_toward_the_main_models_next_next_token(model):
    head = MTPHead.for_model(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (4, 12), generator=g)
    attention = torch.ones_like(ids)
    attention[1, 9:] = 0  # right padding
    loss_mask = attention.clone()
    loss_mask[:, :4] = 0  # a prompt
    before = mtp_loss(model, head, ids, attention, loss_mask)
    # by hand, position by position: h_t and e(x_t+1) give the head's guess at token t + 2,
    # against the main model's distribution at t + 1; the mean over the counted positions
    kls = []
    with torch.no_grad():
        for r in range(4):
            out = model(input_ids=ids[r : r + 1], output_hidden_states=True)
            for t in range(ids.shape[1] - 2):
                if loss_mask[r, t + 2] and attention[r, t + 2]:
                    state = head(out.hidden_states[-1][0, t],
                                 model.get_input_embeddings()(ids[r, t + 1]))
                    q = torch.log_softmax(head.logits(state, model.lm_head.weight).double(), -1)
                    p = torch.log_softmax(out.logits[0, t + 1].double(), -1)
                    kls.append(float((p.exp() * (p - q)).sum()))
    assert len(kls) == 3 * 8 + 5
    # float32 forwards (batched there, one row here) and a float32 log-softmax over the
    # vocabulary there: 64 eps32 of the loss's size
    assert before.item() == pytest.approx(sum(kls) / len(kls),
                                          abs=64 * EPS32 * max(1.0, max(kls)))
    optim = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(30):
        loss = mtp_loss(model, head, ids, attention, loss_mask)
        optim.zero_grad()
        loss.backward()
        optim.step()
    assert loss.item() < 0.5 * before.item()
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="at least 3 tokens"):
        mtp_loss(model, head, ids[:, :2], attention[:, :2], loss_mask[:, :2])


def test_metrics_since_count_only_the_calls_after_the_snapshot():
    """What ``posttrain eval`` and a run's held-out evaluations report (``spec/...``): the
    drafts of the calls since a snapshot, the same as a fresh engine's for those calls."""
    model, head = small_vocab_model(vocab=6)
    head = distilled(model, head)
    prompts, greedy = [PROMPT, [4, 4, 1, 5], [2]], SamplingParams(temperature=0.0,
                                                                   max_new_tokens=12)
    busy = TorchEngine(model, pad_token_id=0, draft=head, draft_tokens=2)
    busy.generate([[5, 1], [3]], greedy)  # earlier work (a run's rollouts)
    before = busy.speculative.snapshot()
    busy.generate(prompts, greedy)
    fresh = TorchEngine(model, pad_token_id=0, draft=head, draft_tokens=2)
    outs = fresh.generate(prompts, greedy)
    got = busy.speculative.metrics_since(before)
    assert got == fresh.speculative.metrics_since(type(fresh.speculative)())
    s = fresh.speculative
    assert got["spec/acceptance"] == s.accepted / s.drafted and 0 < s.accepted < s.drafted
    assert got["spec/accepted_per_round"] == pytest.approx(2 * got["spec/acceptance"])
    # every token is emitted by the prefill or a round: 36 tokens, 3 prefills
    assert s.tokens == sum(len(o.token_ids) for o in outs) == 36
    assert got["spec/tokens_per_forward"] == 36 / (3 + s.rounds)
    assert busy.speculative.metrics_since(busy.speculative.snapshot()) == {}  # nothing drafted
