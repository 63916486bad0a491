"""One GRPO step, split into generation / batch preparation / update, for posttrain and TRL,
on a quiet machine and (``--contention``) beside a competing PyTorch process.

Workload (the issue's reference): the `small` tiny preset (Llama, hidden 256, 4 layers),
8 prompts x 8 generations x 32 new tokens, fp32, 2 threads; prompts as chat messages or raw
strings (``--prompts raw``: ``"12+7="``, as TRL's examples use). ``--model-dir`` runs a model
directory instead, such as a real one (docs/real_models.md: SmolLM2-135M-Instruct with
``--new-tokens 64``). Every measurement runs in a
fresh process, as a user runs either framework: posttrain's imports posttrain first (its
OpenMP settings), TRL's imports torch first (torch's). A measurement is ``--steps`` steps after
one warm-up step. posttrain and TRL alternate for ``--rounds`` rounds (this host's speed drifts
by tens of percent over minutes); figures are medians over rounds.

With ``--contention`` each round also measures both beside a competitor this script starts
and stops: another process looping over 256 x 256 fp32 matmuls on 2 threads (what a second
training run does to a 2-core machine). It reports the worst loaded step against the quiet
median. Prints JSON.

    python benchmarks/grpo_step.py [--steps 3] [--rounds 3] [--prompts chat|raw]
                                   [--contention] [--no-trl] [--openmp posttrain|torch]
                                   [--model-dir DIR] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the environment this script was started with, before importing posttrain changes it: the
# competitor and TRL run in it, as a user's other process and a TRL user's would
USER_ENV = dict(os.environ)

PAIRS = [(12, 7), (45, 38), (3, 99), (60, 21), (8, 8), (71, 14), (33, 66), (50, 5)]
G, THREADS = 8, 2
COMPETITOR = ("import torch\ntorch.set_num_threads(2)\na = torch.randn(256, 256)\n"
              "while True:\n    a @ a\n")


def prompt_texts(style: str) -> list[str]:
    return [f"What is {a}+{b}?" if style == "chat" else f"{a}+{b}=" for a, b in PAIRS]


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def posttrain_steps(model_dir: str, steps: int, style: str, new_tokens: int,
                    openmp: str = "posttrain") -> dict:
    """``openmp``: ``posttrain`` imports posttrain before torch, as the CLI does (its OpenMP
    wait policy, chosen from the machine's state); ``torch`` imports torch first (torch's
    defaults)."""
    if openmp == "torch":
        import torch
    # isort: off
    import posttrain  # noqa: F401
    import torch

    # isort: on
    from posttrain.algos import get
    from posttrain.config import OptimConfig, TrainerConfig
    from posttrain.engines import TorchEngine, send_verified
    from posttrain.models import encode_prompt, load_model, load_tokenizer, stop_tokens
    from posttrain.train import Trainer, policy_steps
    from posttrain.types import Batch, Episode, SamplingParams, Segment

    torch.set_num_threads(THREADS)
    torch.set_flush_denormal(True)
    tok, model = load_tokenizer(model_dir), load_model(model_dir)
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    trainer = Trainer(model, OptimConfig(lr=1e-6), steps + 1, TrainerConfig(micro_batch_size=64))
    texts = prompt_texts(style)
    prompts = ([encode_prompt(tok, [{"role": "user", "content": p}]) for p in texts]
               if style == "chat" else [tok(p)["input_ids"] for p in texts])
    times = []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        outs = engine.generate([p for p in prompts for _ in range(G)],
                               SamplingParams(max_new_tokens=new_tokens, seed=step,
                                              stop_token_ids=stop_tokens(tok)))
        t1 = time.perf_counter()
        eps = [Episode([Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)],
                       reward=float(len(o.token_ids) % 2), group_id=str(j // G))
               for j, o in enumerate(outs)]
        batch = Batch.from_episodes(eps, tok.pad_token_id)
        adv = get("advantage", "grpo")(
            rewards=batch.rewards, group_ids=batch.group_index, mask=batch.loss_mask)
        batch = batch.replace(advantages=adv)  # no old_logprobs: the update's forward gives them
        t2 = time.perf_counter()
        policy_steps(trainer, batch)
        t3 = time.perf_counter()
        send_verified(engine, trainer.named_weights(), step + 1, timeout_s=600.0)
        t4 = time.perf_counter()
        times.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, int(batch.loss_mask.sum())))
    runs = times[1:]
    mean = [sum(r[i] for r in runs) / len(runs) for i in range(5)]
    return {"generation_s": mean[0], "prepare_s": mean[1], "update_s": mean[2],
            "sync_s": mean[3], "step_s": sum(mean[:4]), "steps_s": [sum(r[:4]) for r in runs],
            "generated_tokens": mean[4], "generated_tokens_per_s": mean[4] / mean[0],
            "peak_rss_mib": peak_rss_mib(), "openmp_wait": posttrain.OPENMP_WAIT}


def trl_steps(model_dir: str, steps: int, style: str, new_tokens: int) -> dict:
    import contextlib

    import torch  # first: torch's own OpenMP settings, as a TRL user has them
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(THREADS)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    texts = prompt_texts(style)
    rows = [{"prompt": [{"role": "user", "content": p}] if style == "chat" else p} for p in texts]
    step_times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, per_device_train_batch_size=len(texts) * G, num_generations=G,
            max_completion_length=new_tokens, max_steps=steps + 1, learning_rate=1e-6,
            use_cpu=True, report_to=[], logging_steps=1000, save_strategy="no", beta=0.0,
            temperature=1.0, bf16=False, dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, processing_class=tok, args=args,
                              train_dataset=Dataset.from_list(rows),
                              reward_funcs=[lambda completions, **kw: [float(len(str(c)) % 2)
                                                                      for c in completions]],
                              callbacks=[Timer()])
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout pure JSON
            trainer.train()
    runs = step_times[1:]
    return {"step_s": sum(runs) / len(runs), "steps_s": runs, "peak_rss_mib": peak_rss_mib()}


def measure(which: str, model_dir: str, steps: int, style: str, new_tokens: int,
            openmp: str) -> dict:
    """One measurement in a fresh process; a failure is reported, not hidden."""
    run = subprocess.run([sys.executable, __file__, "--measure", which, "--model-dir", model_dir,
                          "--steps", str(steps), "--prompts", style, "--openmp", openmp,
                          "--new-tokens", str(new_tokens)],
                         capture_output=True, text=True, check=False, env=USER_ENV)
    if run.returncode:
        return {"error": (run.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(run.stdout)


def summary(runs: list[dict], quiet: float | None = None) -> dict:
    """Medians over rounds; beside a competitor also the worst step and its ratio to
    ``quiet``."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0]["error"]}
    out = {k: statistics.median(r[k] for r in good) for k, v in good[0].items()
           if isinstance(v, float)}
    out["step_s_per_round"] = [r["step_s"] for r in good]
    if "openmp_wait" in good[0]:  # posttrain's choice at import, a round each
        out["openmp_wait"] = [r["openmp_wait"]["policy"] for r in good]
    if quiet is not None:
        worst = max(s for r in good for s in r["steps_s"])
        out |= {"worst_step_s": worst, "worst_vs_quiet": worst / quiet}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate posttrain and TRL this many times (the host's speed drifts)")
    ap.add_argument("--prompts", choices=("chat", "raw"), default="chat")
    ap.add_argument("--contention", action="store_true",
                    help="also measure beside a competing 2-thread PyTorch process")
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--openmp", choices=("posttrain", "torch"), default="posttrain",
                    help="posttrain: its OpenMP wait policy, chosen at import (the default); "
                         "torch: torch's own")
    ap.add_argument("--model-dir", help="a model directory (default: the tiny preset 'small', "
                                        "built here)")
    ap.add_argument("--new-tokens", type=int, default=32, help="new tokens a generation")
    ap.add_argument("--measure", choices=("posttrain", "trl"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        result = posttrain_steps(a.model_dir, a.steps, a.prompts, a.new_tokens, a.openmp) \
            if a.measure == "posttrain" else trl_steps(a.model_dir, a.steps, a.prompts,
                                                       a.new_tokens)
        print(json.dumps(result))
        return
    from posttrain.models import build_tiny, load_model

    names = ["posttrain"] + ([] if a.no_trl else ["trl"])
    loads = ["quiet", "loaded"] if a.contention else ["quiet"]
    runs: dict[tuple[str, str], list[dict]] = {(n, c): [] for n in names for c in loads}
    with tempfile.TemporaryDirectory() as d:
        model_dir = a.model_dir or str(build_tiny(Path(d) / "small", "small"))
        n_params = sum(p.numel() for p in load_model(model_dir).parameters())
        for _ in range(a.rounds):
            for load in loads:
                competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR],
                                              env=USER_ENV) if load == "loaded" else None
                try:
                    for name in names:
                        runs[name, load].append(
                            measure(name, model_dir, a.steps, a.prompts, a.new_tokens,
                                    a.openmp))
                finally:
                    if competitor is not None:
                        competitor.kill()
                        competitor.wait()
    result = {"model": a.model_dir or "tiny preset 'small'", "parameters": n_params,
              "workload": f"{len(PAIRS)} {a.prompts} prompts x {G} generations x "
                          f"{a.new_tokens} new tokens, fp32, {THREADS} threads",
              "rounds": a.rounds, "steps_per_round": a.steps, "posttrain_openmp": a.openmp}
    for name in names:
        quiet = summary(runs[name, "quiet"])
        result[name] = quiet
        if a.contention and "error" not in quiet:
            result[f"{name}_loaded"] = summary(runs[name, "loaded"], quiet["step_s"])
    if "trl" in result and "error" not in result["trl"]:
        result["speedup_vs_trl"] = result["trl"]["step_s"] / result["posttrain"]["step_s"]
        result["speedup_per_round"] = [t / o for o, t in zip(
            result["posttrain"]["step_s_per_round"], result["trl"]["step_s_per_round"])]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
