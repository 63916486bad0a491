"""Peak memory of chunked vs naive log-prob + entropy (forward and backward).

Each variant runs in a fresh subprocess; peak RSS above the post-setup baseline is reported.
Workload: vocab 151,936, 4,096 tokens (4 x 1,024), hidden 64, one layer. Prints JSON.

    python benchmarks/logprob_memory.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

VOCAB, BATCH, SEQ = 151_936, 4, 1024


def measure(variant: str) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from posttrain.models import naive_sequence_logprobs, sequence_logprobs

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=SEQ, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    attn = torch.ones_like(ids)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if variant == "chunked":
        lp, ent = sequence_logprobs(model, ids, attn, chunk_size=512)
    else:
        lp, ent = naive_sequence_logprobs(model, ids, attn)
    (lp.sum() + ent.sum()).backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"variant": variant, "peak_rss_above_baseline_mib": round((peak - base) / 1024, 1),
            "logp_sum": float(lp.sum())}


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(measure(sys.argv[1])))
        return
    results = {}
    for variant in ("naive", "chunked"):
        out = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True,
                             check=True)
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    full_logits_mib = BATCH * SEQ * VOCAB * 4 / 2**20
    print(json.dumps({"vocab": VOCAB, "tokens": BATCH * SEQ,
                      "one_fp32_logits_tensor_mib": round(full_logits_mib, 1), **results},
                     indent=2))


if __name__ == "__main__":
    main()
