import pytest
import torch

from posttrain.engines import (
    Engine,
    TorchEngine,
    counter_uniforms,
    processed_logprobs,
    row_seeds,
    sample_tokens,
)
from posttrain.models import encode_prompt, sequence_logprobs
from posttrain.types import Batch, Episode, SamplingParams, Segment

# The engine (incremental decoding, KV cache) and the trainer (one full forward) are two float32
# computations of the same log-probs: within 16 eps32 of the largest (~8 chained float32
# reductions through the 2-layer model, head and logsumexp, ~2 eps32 each).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def prompts(tok, n):
    return [encode_prompt(tok, [{"role": "user", "content": "What is " + "1+" * i + "2?"}])
            for i in range(n)]


@pytest.fixture(params=[True, False], ids=["llama_decoder", "hf_decoder"])
def engine(model, tokenizer, request):
    return TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id, fast=request.param)


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, Engine) and engine.version == 0


def test_engine_logprobs_match_trainer_recompute(engine, model, tokenizer):
    outs = engine.generate(prompts(tokenizer, 6), SamplingParams(max_new_tokens=12, seed=1))
    eps = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)])
           for o in outs]
    b = Batch.from_episodes(eps, tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, b.input_ids, b.attention_mask)
    diff = ((lp - b.behaviour_logprobs).abs() * b.loss_mask).max().item()
    bound = 16 * EPS32 * float((b.behaviour_logprobs.abs() * b.loss_mask).max())
    assert b.loss_mask.sum() > 0 and diff < bound


def test_mixed_prompt_lengths_match_one_by_one(engine, tokenizer):
    ps = prompts(tokenizer, 4)
    assert len({len(p) for p in ps}) == 4
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    together = engine.generate(ps, greedy)
    alone = [engine.generate([p], greedy)[0] for p in ps]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert all(lp == 0.0 for o in together for lp in o.logprobs)


def test_seed_reproducible_and_different_seeds_differ(engine, tokenizer):
    ps = prompts(tokenizer, 3) * 4
    a = engine.generate(ps, SamplingParams(max_new_tokens=10, seed=7))
    b = engine.generate(ps, SamplingParams(max_new_tokens=10, seed=7))
    c = engine.generate(ps, SamplingParams(max_new_tokens=10, seed=8))
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_a_rows_completion_does_not_depend_on_its_batch(engine, tokenizer):
    ps = prompts(tokenizer, 3) * 2
    sampling = SamplingParams(max_new_tokens=10, seed=5)
    together = engine.generate(ps, sampling)
    seeds = row_seeds(5, len(ps))
    alone = [engine.generate([p], sampling, seeds=[s])[0] for p, s in zip(ps, seeds)]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert len({tuple(o.token_ids) for o in together}) > 3  # same prompt, different rows


def test_resuming_a_cut_generation_continues_it_exactly(engine, tokenizer):
    p = prompts(tokenizer, 1)[0]
    whole = engine.generate([p], SamplingParams(max_new_tokens=12), seeds=[99])[0]
    head = engine.generate([p], SamplingParams(max_new_tokens=5), seeds=[99])[0]
    tail = engine.generate([p + head.token_ids], SamplingParams(max_new_tokens=7),
                           seeds=[99])[0]
    assert head.token_ids + tail.token_ids == whole.token_ids
    torch.testing.assert_close(head.logprobs + tail.logprobs, whole.logprobs,
                               atol=16 * EPS32 * max(abs(x) for x in whole.logprobs), rtol=0)


def test_stop_tokens_and_length_finish(engine, tokenizer):
    p = prompts(tokenizer, 1)
    free = engine.generate(p, SamplingParams(max_new_tokens=6, temperature=0))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 6
    stop = free.token_ids[2]
    cut = engine.generate(p, SamplingParams(max_new_tokens=6, temperature=0,
                                            stop_token_ids=(stop,)))[0]
    first = free.token_ids.index(stop)
    assert cut.token_ids == free.token_ids[: first + 1] and cut.finish_reason == "stop"


def test_top_k_one_is_greedy_with_logprob_zero(engine, tokenizer):
    p = prompts(tokenizer, 2)
    greedy = engine.generate(p, SamplingParams(max_new_tokens=6, temperature=0))
    k1 = engine.generate(p, SamplingParams(max_new_tokens=6, top_k=1, seed=3))
    assert [o.token_ids for o in greedy] == [o.token_ids for o in k1]
    # the one kept token: 0 - log(exp(0)), exp within 2 ulp of 1, then log: <= 4 eps32
    assert all(abs(x) <= 4 * EPS32 for o in k1 for x in o.logprobs)


def test_processed_logprobs_truncation():
    # probabilities <= 1 through log, scaling, logsumexp and exp in float32: each rounding is
    # <= ~1 ulp relative, so the error is <= a few eps32 x p |log p| <= 4 eps32
    tol = {"atol": 4 * EPS32, "rtol": 0}
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_p = processed_logprobs(logits, SamplingParams(top_p=0.7)).exp()
    torch.testing.assert_close(top_p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]), **tol)
    top_k = processed_logprobs(logits, SamplingParams(top_k=3)).exp()
    torch.testing.assert_close(top_k, torch.tensor([[0.5, 0.3, 0.15, 0]]) / 0.95, **tol)
    hot = processed_logprobs(logits, SamplingParams(temperature=0.5)).exp()
    expected = torch.tensor([[0.25, 0.09, 0.0225, 0.0025]])
    torch.testing.assert_close(hot, expected / expected.sum(), **tol)


def test_update_weights_changes_generation_and_version(engine, model, tokenizer):
    p = prompts(tokenizer, 2)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    before = engine.generate(p, greedy)
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(torch.randn_like(prm) * 0.5)
    engine.update_weights(model.named_parameters(), version=5)
    after = engine.generate(p, greedy)
    assert engine.version == 5 and after[0].version == 5
    assert [o.token_ids for o in before] != [o.token_ids for o in after]
    with pytest.raises(KeyError):
        engine.update_weights([("nope", torch.zeros(1))], 6)


def test_empty_prompt_rejected(engine):
    with pytest.raises(ValueError):
        engine.generate([[]], SamplingParams())


def test_sampler_frequencies_follow_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    logits = torch.log(probs).expand(20000, 4)
    uniforms = counter_uniforms(torch.full((20000,), 3), torch.arange(20000))
    tokens, logp = sample_tokens(logits, SamplingParams(), uniforms)
    freq = torch.bincount(tokens, minlength=4) / len(tokens)
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)  # ~4 standard errors
    assert freq[3] == 0
    # log p - logsumexp(log p), and logsumexp(log p) = log(1 +- 2 eps32): <= 4 eps32
    torch.testing.assert_close(logp, torch.log(probs)[tokens], atol=4 * EPS32, rtol=0)
