"""SFT step time: one conversation a row vs packed rows, and full fine-tuning vs LoRA.

Workload: the micro model, 64 conversations a step of mixed-length chat data (arithmetic
worked solutions, a quarter with a long system prompt so lengths vary 3x). Each variant runs
``--steps`` optimiser steps after one warm-up step; prints JSON (seconds a step, padded tokens
a step, trainable parameters).

    python benchmarks/sft_packing.py [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

import torch

from posttrain.config import LoraConfig, OptimConfig, TrainerConfig
from posttrain.data.conversations import conversation_segment
from posttrain.envs import ArithmeticTasks
from posttrain.models import build_tiny, load_model, load_tokenizer
from posttrain.train import Trainer, sft_step
from posttrain.types import Batch, Episode

LONG = "You are a careful arithmetic tutor. Show the column work, then the answer. " * 3


def conversations(n: int, seed: int) -> list[list[dict]]:
    tasks, rng = ArithmeticTasks(("+", "-"), 2), random.Random(seed)
    out = []
    for p in tasks.sample(n, rng):
        conv = tasks.sft_conversation(p, 0.0, rng)
        out.append([{"role": "system", "content": LONG}, *conv] if rng.random() < 0.25 else conv)
    return out


def run(variant: str, steps: int, model_dir, tokenizer) -> dict:
    torch.manual_seed(0)
    lora = LoraConfig(r=8, alpha=16) if variant == "lora" else None
    trainer = Trainer(load_model(model_dir), OptimConfig(lr=1e-3), steps + 1,
                      TrainerConfig(lora=lora))
    batches = []
    for k in range(steps + 1):
        segs = [conversation_segment(tokenizer, c) for c in conversations(64, k)]
        batches.append(Batch.packed(segs, 512, tokenizer.pad_token_id) if variant == "packed"
                       else Batch.from_episodes([Episode([s]) for s in segs],
                                                tokenizer.pad_token_id))
    sft_step(trainer, batches[0])
    start = time.perf_counter()
    losses = [sft_step(trainer, b)["loss"] for b in batches[1:]]
    seconds = (time.perf_counter() - start) / steps
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return {"variant": variant, "seconds_per_step": round(seconds, 4),
            "rows_per_step": len(batches[1]),
            "padded_tokens_per_step": int(batches[1].input_ids.numel()),
            "real_tokens_per_step": int((batches[1].attention_mask > 0).sum()),
            "trainable_parameters": trainable, "last_loss": round(losses[-1], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny(f"{tmp}/micro", "micro", seed=0)
        tokenizer = load_tokenizer(model_dir)
        results = [run(v, args.steps, model_dir, tokenizer) for v in ("rows", "packed", "lora")]
    print(json.dumps({"benchmark": "sft_packing", "steps": args.steps, "results": results},
                     indent=2))


if __name__ == "__main__":
    main()
