"""Both incremental decoders give the logits of a plain full forward, through prefill, row
selection (repeats, drops) and steps, for Llama (MHA and GQA with biases), Qwen2 and Qwen3
(q/k norms); the HF decoder also for Qwen3-MoE and Gemma 3."""

import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from posttrain.engines.decoders import HFDecoder, LlamaDecoder

SMALL = {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 64}
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


# chained float32 reductions a layer, in the order the residual stream meets them: norm, q/k/v,
# scores, softmax, weights x values, output projection, norm, gate/up, down (Llama, Qwen2); Qwen3
# adds q/k norms; Qwen3-MoE also the router's softmax and the experts' weighted sum; Gemma 3 the
# q/k norms and the post-attention and post-feed-forward norms (its sqrt(hidden) embedding scale,
# `(1 + w)` norm weights and tanh GELU are element-wise, ~1 eps32 each, and are counted here as
# the reduction they feed)
REDUCTIONS_PER_LAYER = {"llama_mha": 9, "llama_gqa_bias": 9, "qwen2": 9, "qwen3": 10,
                        "qwen3_moe": 12, "gemma3": 12}


def close(logits, expected, kind):
    """float32 ``logits`` within 2 eps32 a chained reduction of the largest float64 ``expected``
    logit: the chain is the model's layers x ``REDUCTIONS_PER_LAYER`` plus the final norm and the
    head (Gemma 3, 2 layers: 26 reductions, 52 eps32; Llama: 20, 40 eps32)."""
    chain = SMALL["num_hidden_layers"] * REDUCTIONS_PER_LAYER[kind] + 2
    torch.testing.assert_close(logits.double(), expected,
                               atol=2 * chain * EPS32 * float(expected.abs().max()), rtol=0)


def build(kind):
    torch.manual_seed(0)
    if kind == "llama_mha":
        model = LlamaForCausalLM(LlamaConfig(**SMALL, num_key_value_heads=4))
    elif kind == "llama_gqa_bias":
        model = LlamaForCausalLM(LlamaConfig(**SMALL, num_key_value_heads=2, attention_bias=True,
                                             mlp_bias=True))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SMALL, num_key_value_heads=1))
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8))
    elif kind == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
            **SMALL, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[]))
        model.set_experts_implementation("eager")  # grouped_mm has no float64 reference
    else:
        model = Gemma3ForCausalLM(Gemma3TextConfig(**SMALL, num_key_value_heads=2, head_dim=8,
                                                   query_pre_attn_scalar=8, sliding_window=4))
    model.set_attn_implementation("eager")
    with torch.no_grad():  # non-trivial biases and norm weights
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
            elif "norm" in name:
                p.normal_(1, 0.3)
    return model.eval()


def full_forward_last_logits(model, rows):
    """Reference: each row alone, no cache."""
    out = []
    for r in rows:
        ids = torch.tensor([r])
        out.append(model(input_ids=ids).logits[0, -1])
    return torch.stack(out)


@pytest.mark.parametrize("kind,decoder_cls", [
    *((k, d) for k in ("llama_mha", "llama_gqa_bias", "qwen2", "qwen3")
      for d in (LlamaDecoder, HFDecoder)),
    ("qwen3_moe", HFDecoder), ("gemma3", HFDecoder)])
@torch.no_grad()
def test_decoder_matches_full_forward(kind, decoder_cls):
    model = build(kind)
    reference = build(kind).double()  # the full forward in float64
    decoder = decoder_cls(model)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    ids = torch.zeros((3, 5), dtype=torch.long)
    valid = torch.zeros((3, 5), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, 5 - len(p) :], valid[i, 5 - len(p) :] = torch.tensor(p), True
    logits = decoder.prefill(ids, valid, max_new=4)
    expected = full_forward_last_logits(reference, prompts)
    close(logits, expected, kind)
    rows = [2, 0, 0, 1]  # reorder, repeat
    decoder.select(torch.tensor(rows))
    seqs = [list(prompts[r]) for r in rows]
    for step_tokens in ([20, 21, 22, 23], [30, 31, 32, 33]):
        logits = decoder.step(torch.tensor(step_tokens))
        seqs = [s + [t] for s, t in zip(seqs, step_tokens)]
        expected = full_forward_last_logits(reference, seqs)
        close(logits, expected, kind)
    decoder.select(torch.tensor([3, 1]))  # drop finished rows
    logits = decoder.step(torch.tensor([40, 41]))
    seqs = [seqs[3] + [40], seqs[1] + [41]]
    close(logits, full_forward_last_logits(reference, seqs), kind)


@torch.no_grad()
def test_fused_weights_follow_in_place_updates():
    model = build("llama_gqa_bias")
    decoder = LlamaDecoder(model)
    new = build("llama_gqa_bias")
    with torch.no_grad():
        for (name, p), (_, q) in zip(model.named_parameters(), new.named_parameters()):
            q.mul_(1.5)
            p.copy_(q)  # what TorchEngine.update_weights does
    ids, valid = torch.tensor([[3, 4, 5]]), torch.ones((1, 3), dtype=torch.bool)
    close(decoder.prefill(ids, valid, 1), full_forward_last_logits(new.double(), [[3, 4, 5]]),
          "llama_gqa_bias")


def test_unsupported_architecture_is_refused():
    model = build("llama_mha")
    model.config.hidden_act = "gelu"
    assert not LlamaDecoder.supports(model)
    with pytest.raises(ValueError, match="does not support"):
        LlamaDecoder(model)
    assert not LlamaDecoder.supports(build("qwen3_moe"))
    assert not LlamaDecoder.supports(build("gemma3"))
