"""One GRPO step, split into generation / batch preparation / update, for posttrain and TRL.

Workload (the issue's reference): the `small` tiny preset (Llama, hidden 256, 4 layers),
8 prompts x 8 generations x 32 new tokens, fp32, 2 threads. posttrain's figures are the mean
of `--steps` steps after one warm-up step; TRL's `GRPOTrainer` (extra `bench`) runs the same
model, prompts and settings in this process for comparison. The two alternate for ``--rounds``
rounds (this host's speed drifts by tens of percent over minutes); figures are medians over
rounds, and the per-round ratios are printed too. Prints JSON.

    python benchmarks/grpo_step.py [--steps 3] [--rounds 3] [--no-trl]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import sys
import tempfile
import time

import torch

from posttrain.algos import get
from posttrain.engines import TorchEngine
from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
from posttrain.settings import OptimConfig, TrainerConfig
from posttrain.train import Trainer, rl_steps
from posttrain.types import Batch, Episode, SamplingParams, Segment

PROMPTS = [f"What is {a}+{b}?" for a, b in [(12, 7), (45, 38), (3, 99), (60, 21), (8, 8),
                                             (71, 14), (33, 66), (50, 5)]]
G, NEW_TOKENS = 8, 32


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def posttrain_steps(model_dir, steps: int) -> dict:
    tok, model = load_tokenizer(model_dir), load_model(model_dir)
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    trainer = Trainer(model, OptimConfig(lr=1e-6), steps + 1, TrainerConfig(micro_batch_size=64))
    prompts = [encode_prompt(tok, [{"role": "user", "content": p}]) for p in PROMPTS]
    times = []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        outs = engine.generate([p for p in prompts for _ in range(G)],
                               SamplingParams(max_new_tokens=NEW_TOKENS, seed=step))
        t1 = time.perf_counter()
        eps = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)],
                       reward=float(len(o.token_ids) % 2), group_id=str(j // G))
               for j, o in enumerate(outs)]
        batch = Batch.from_episodes(eps, tok.pad_token_id)
        adv = get("advantage", "grpo")(
            rewards=batch.rewards, group_ids=batch.group_index, mask=batch.loss_mask)
        batch = batch.replace(advantages=adv)  # no old_logprobs: the update's forward gives them
        t2 = time.perf_counter()
        rl_steps(trainer, batch)
        engine.update_weights(trainer.named_weights(), step + 1)
        t3 = time.perf_counter()
        tokens = int(batch.loss_mask.sum())
        times.append((t1 - t0, t2 - t1, t3 - t2, tokens))
    runs = times[1:]
    mean = [sum(r[i] for r in runs) / len(runs) for i in range(4)]
    total = sum(mean[:3])
    return {"generation_s": mean[0], "prepare_s": mean[1], "update_s": mean[2],
            "old_logprob_pass": "none: one optimiser step per rollout takes them from its forward",
            "step_s": total, "generated_tokens": mean[3],
            "generated_tokens_per_s": mean[3] / mean[0], "step_tokens_per_s": mean[3] / total,
            "peak_rss_mib": peak_rss_mib()}


def trl_steps(model_dir, steps: int) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok, model = load_tokenizer(model_dir), load_model(model_dir)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])
    step_times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, per_device_train_batch_size=len(PROMPTS) * G, num_generations=G,
            max_completion_length=NEW_TOKENS, max_steps=steps + 1, learning_rate=1e-6,
            use_cpu=True, report_to=[], logging_steps=1000, save_strategy="no", beta=0.0,
            temperature=1.0, bf16=False, dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, processing_class=tok, args=args, train_dataset=data,
                              reward_funcs=[lambda completions, **kw: [float(len(str(c)) % 2)
                                                                      for c in completions]],
                              callbacks=[Timer()])
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout pure JSON
            trainer.train()
    runs = step_times[1:]
    return {"step_s": sum(runs) / len(runs), "peak_rss_mib": peak_rss_mib()}


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate posttrain and TRL this many times (the host's speed drifts)")
    ap.add_argument("--no-trl", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.set_flush_denormal(True)
    with tempfile.TemporaryDirectory() as d:
        model_dir = build_tiny(d + "/small", "small")
        n_params = sum(p.numel() for p in load_model(model_dir).parameters())
        ours, theirs, errors = [], [], []
        for _ in range(a.rounds):
            ours.append(posttrain_steps(model_dir, a.steps))
            if a.no_trl or errors:
                continue
            try:
                theirs.append(trl_steps(model_dir, a.steps))
            except Exception as e:  # report, do not hide: TRL is an optional extra
                errors.append(f"{type(e).__name__}: {e}")
        result = {"model": "tiny preset 'small'", "parameters": n_params,
                  "workload": f"{len(PROMPTS)} prompts x {G} generations x {NEW_TOKENS} "
                              "new tokens, fp32, 2 threads",
                  "rounds": a.rounds, "steps_per_round": a.steps,
                  "posttrain": {k: median([r[k] for r in ours]) if isinstance(v, float) else v
                                for k, v in ours[0].items()},
                  "posttrain_step_s_per_round": [r["step_s"] for r in ours]}
        if theirs:
            result["trl"] = {k: median([r[k] for r in theirs]) for k in theirs[0]}
            result["trl_step_s_per_round"] = [r["step_s"] for r in theirs]
            result["speedup_vs_trl"] = result["trl"]["step_s"] / result["posttrain"]["step_s"]
            result["speedup_per_round"] = [t["step_s"] / o["step_s"] for o, t in zip(ours, theirs)]
        if errors:
            result["trl"] = {"error": errors[0]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
