"""The recipes through the ``posttrain`` CLI on the device that ``auto`` picks (CUDA on a GPU
machine): the quickstart as the README runs it, then at a reduced size in bf16 with a sleeping
engine, DPO, PPO with a critic, on-policy distillation (``full_vocab_rkl``) and offline KD
from the quickstart's RL model, RL with issue 39's estimators and curriculum from its SFT
model, and OPD of a fresh student with another tokenizer from its RL model. Prints JSON: each
run's exit code, seconds, held-out accuracies, and the end of its output when it failed.

    python benchmarks/gpu_recipes.py --out runs/gpu_recipes > recipes.json

The same runs are tested on the CPU (tests/e2e); this script is the GPU check's second half
(``benchmarks/gpu_kit.py command``), where device placement bugs show.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHORT = ["sft.steps=200", "sft.num_examples=5000", "rl.steps=10", "rl.eval_every=10",
         "eval.num_problems=100"]
QS = "configs/quickstart.yaml"


def runs(out: Path) -> dict[str, list[str]]:
    """Run name -> the CLI's arguments; later runs load the quickstart's models."""
    qs = out / "quickstart"
    rl_from_sft = ["train", QS, "stages=[rl]", "model.preset=null",
                   f"model.path={qs / 'sft_model'}", "rl.steps=10", "rl.eval_every=10",
                   "eval.num_problems=100"]
    return {
        "quickstart": ["quickstart", "--out", str(qs)],
        "bf16_sleep": ["train", QS, *SHORT, "trainer.precision=bf16", "engine.sleep=true"],
        "dpo": ["train", "configs/dpo.yaml", "sft.steps=200", "pref.steps=20",
                "pref.eval_every=20", "eval.num_problems=100"],
        "ppo": ["train", "configs/ppo.yaml", *SHORT],
        "opd": ["train", QS, "stages=[opd]", "model.preset=null", f"model.path={qs / 'sft_model'}",
                f"opd.teachers=[{{path: {qs / 'rl_model'}}}]", "opd.loss=full_vocab_rkl",
                "opd.steps=10", "opd.eval_every=10", "eval.num_problems=100"],
        "distill": ["train", QS, "stages=[distill]", "model.preset=null",
                    f"model.path={qs / 'sft_model'}",
                    f"distill.teacher={qs / 'rl_model'}", "distill.steps=20",
                    "eval.num_problems=100"],
        # the estimators of issue 39 and the curriculum, from the quickstart's SFT model
        "maxrl_clip_cov": [*rl_from_sft, "algo.adv_estimator=maxrl",
                           "actor.policy_loss.name=clip_cov", "algo.top_entropy={rho: 0.5}",
                           "algo.offpolicy.kpop_phi=0.5", "task.curriculum={pool_size: 256}"],
        "kl_cov_m2po": [*rl_from_sft, "actor.policy_loss.name=kl_cov", "rl.mini_batches=2",
                        "algo.offpolicy.m2po_tau=0.04"],
        # a fresh student of another tokenizer (the small preset's) from the RL model
        "opd_cross_tokenizer": ["train", QS, "stages=[opd]", "model.preset=small",
                                f"opd.teachers=[{{path: {qs / 'rl_model'}}}]",
                                "opd.loss=opd_sampled", "opd.steps=10", "opd.eval_every=10",
                                "eval.num_problems=100"],
    }


def run(name: str, args: list[str], out: Path) -> dict:
    if args[0] == "train":
        args = [*args, "--out", str(out / name)]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "posttrain.cli.app", *args], capture_output=True,
                          text=True)
    report = {"rc": done.returncode, "seconds": round(time.perf_counter() - start, 1)}
    summary = out / name / "summary.json"
    if summary.is_file():
        report |= {k: v.get("accuracy", v) if isinstance(v, dict) else v
                   for k, v in json.loads(summary.read_text()).items() if k.startswith("eval")}
    if done.returncode:
        report["output"] = (done.stdout + done.stderr)[-3000:]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/gpu_recipes"))
    parser.add_argument("--only", nargs="+", help="these runs (the quickstart's models needed)")
    parser.add_argument("--report", type=Path, help="also write the report here after each run")
    args = parser.parse_args()
    report = {}
    for name, cli in runs(args.out).items():
        if args.only and name not in args.only:
            continue
        report[name] = run(name, cli, args.out)
        print(f"[gpu_recipes] {name}: rc {report[name]['rc']}, {report[name]['seconds']} s",
              file=sys.stderr)
        if args.report:
            args.report.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
