import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.models import (
    ChatTemplateError,
    ModelNotFoundError,
    encode_chat,
    load_model,
    naive_sequence_logprobs,
    sequence_logprobs,
)

# Chunked and naive log-probs are two float32 computations of the same values in different
# orders. Bounds, relative to the largest value compared: 16 eps32 for a forward value (~8
# chained float32 reductions through the 2-layer model, head and logsumexp, ~2 eps32 each),
# 32 eps32 for a gradient (forward and backward).
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def test_tiny_dir_loads_with_auto_classes(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "llama"
    assert (tiny_dir / "model.safetensors").is_file()
    assert tok.pad_token_id != tok.eos_token_id
    assert model.config.vocab_size == len(tok)
    ids = tok.encode("What is 12+345?", add_special_tokens=False)
    assert [t for t in tok.convert_ids_to_tokens(ids) if t.isdigit()] == list("12345")
    assert tok.decode(ids) == "What is 12+345?"


def test_encode_chat_masks_assistant_through_eos(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<answer>4</answer>"},
            {"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]
    ids, mask = encode_chat(tokenizer, msgs)
    assert len(ids) == len(mask)
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    assert tokenizer.decode(ids) == text
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "<answer>4</answer><|im_end|>6<|im_end|>"


def test_encode_chat_rejects_bad_messages(tokenizer):
    with pytest.raises(ValueError):
        encode_chat(tokenizer, [])
    with pytest.raises(ValueError, match="role"):
        encode_chat(tokenizer, [{"content": "x"}])


def test_non_prefix_stable_template_is_detected(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = ("{% for m in messages|reverse %}{{ m['role'] }}:{{ m['content'] }}\n"
                         "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    with pytest.raises(ChatTemplateError):
        encode_chat(tok, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                          {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}])


def test_missing_model_dir_is_clear(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("checkpointed", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_equal_naive_values_and_grads(model, temperature, checkpointed):
    torch.manual_seed(0)
    ids = torch.randint(5, 200, (3, 11))
    attn = torch.ones_like(ids)
    attn[1, 8:] = 0
    lp, ent = sequence_logprobs(model, ids, attn, temperature, chunk_size=4,
                                checkpoint_chunks=checkpointed)
    (lp * attn).sum().backward()
    g_chunk = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    lp2, ent2 = naive_sequence_logprobs(model, ids, attn, temperature)
    (lp2 * attn).sum().backward()
    valid = attn.bool()
    torch.testing.assert_close(lp[valid], lp2[valid],
                               atol=16 * EPS32 * float(lp2[valid].abs().max()), rtol=0)
    torch.testing.assert_close(ent[valid], ent2[valid],
                               atol=16 * EPS32 * float(ent2[valid].abs().max()), rtol=0)
    for a, p in zip(g_chunk, model.parameters()):
        torch.testing.assert_close(a, p.grad, atol=32 * EPS32 * float(p.grad.abs().max()), rtol=0)


def test_score_mask_limits_scoring_and_keeps_a_graph(model):
    torch.manual_seed(0)
    ids = torch.randint(5, 200, (2, 9))
    attn = torch.ones_like(ids)
    score = torch.zeros(ids.shape)
    score[0, 4:7] = 1
    score[1, 8] = 1
    full, _ = sequence_logprobs(model, ids, attn)
    part, ent = sequence_logprobs(model, ids, attn, score_mask=score)
    # the same hidden states; only the head matmul (other rows) and the logsumexp may round
    # differently: 2 reductions, ~2 eps32 each of the largest log-prob
    torch.testing.assert_close(part[score.bool()], full[score.bool()],
                               atol=4 * EPS32 * float(full[score.bool()].abs().max()), rtol=0)
    assert (part[~score.bool()] == 0).all() and (ent[~score.bool()] == 0).all()
    none, _ = sequence_logprobs(model, ids, attn, score_mask=torch.zeros(ids.shape))
    none.sum().backward()  # a micro-batch without trainable tokens still back-propagates
    assert (none == 0).all()


def test_explicit_targets_score_other_tokens_than_the_inputs(model):
    """``targets`` replaces ``input_ids`` as the scored token, nothing else: scoring the
    inputs' next tokens reads the naive logits at the same positions."""
    torch.manual_seed(0)
    ids = torch.randint(5, 200, (2, 9))
    attn = torch.ones_like(ids)
    targets = torch.randint(5, 200, ids.shape)
    lp, _ = sequence_logprobs(model, ids, attn, targets=targets)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits.double()
    want = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets[:, 1:, None])[..., 0]
    torch.testing.assert_close(lp[:, 1:].double(), want,
                               atol=16 * EPS32 * float(want.abs().max()), rtol=0)
    assert (lp[:, 0] == 0).all()


def test_k_targets_a_position_and_the_top_k_read_the_same_distribution(model):
    """``targets`` ``[B, T, K]`` score K tokens at each position, and ``top_logprobs`` (in
    chunks smaller than the sequence) returns the K likeliest, likeliest first: both the
    naive logits' log-softmax at those positions."""
    from posttrain.models.logprobs import top_logprobs

    torch.manual_seed(1)
    ids = torch.randint(5, 200, (2, 9))
    attn = torch.ones_like(ids)
    targets = torch.randint(0, 200, (2, 9, 3))
    lp, _ = sequence_logprobs(model, ids, attn, targets=targets, with_entropy=False)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits.double(), -1)
    want = logp[:, :-1].gather(-1, targets[:, 1:])
    tolerance = 16 * EPS32 * float(want.abs().max())
    torch.testing.assert_close(lp[:, 1:].double(), want, atol=tolerance, rtol=0)
    assert lp.shape == (2, 9, 3) and (lp[:, 0] == 0).all()
    with pytest.raises(ValueError, match="log-probs only"):
        sequence_logprobs(model, ids, attn, targets=targets)
    with torch.no_grad():
        tokens, values = top_logprobs(model, ids[0], 4, chunk_size=3)
    best = logp[0, :-1].topk(4)
    assert torch.equal(tokens, best.indices)
    torch.testing.assert_close(values.double(), best.values, atol=tolerance, rtol=0)


def test_a_models_own_logit_soft_capping_is_applied():
    """Gemma 2's forward caps its logits (``c tanh(z / c)``) after the head; the chunked
    log-probs and the distillation distributions cap them too, as its forward does."""
    from transformers import AutoModelForCausalLM, Gemma2Config

    from posttrain.models.logprobs import token_distributions

    torch.manual_seed(0)
    gemma = AutoModelForCausalLM.from_config(Gemma2Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        final_logit_softcapping=2.0)).eval()
    ids = torch.randint(3, 128, (2, 9))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        lp, _ = sequence_logprobs(gemma, ids, attn)
        naive, _ = naive_sequence_logprobs(gemma, ids, attn)
        dists = token_distributions(gemma, ids, attn, attn)
        logits = gemma(input_ids=ids, attention_mask=attn).logits.double()
    # uncapped, the gap was 2.5e-3 here: the bound is fp32 rounding of a few reductions
    torch.testing.assert_close(lp, naive, atol=16 * EPS32 * float(naive.abs().max()), rtol=0)
    want = torch.log_softmax(logits[:, :-1].reshape(-1, 128), -1)
    torch.testing.assert_close(dists.double(), want, atol=16 * EPS32 * float(want.abs().max()),
                               rtol=0)
