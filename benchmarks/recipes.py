"""Held-out accuracy of each RL recipe in configs/, all starting from one SFT model.

Runs the quickstart's SFT stage once (or reuses ``--sft-model``), then every recipe's RL stage
from that model with the quickstart's RL budget (recipes whose SFT data differs run both
stages), and prints JSON: accuracy after SFT, after RL, and wall seconds per recipe.

    python benchmarks/recipes.py [--out runs/recipes] [--sft-model DIR] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from posttrain.config import load_config
from posttrain.recipes.stages import Stages
from posttrain.reporting import Reporter

RECIPES = ["quickstart", "ppo", "dr_grpo", "dapo", "gspo", "kimi_k25"]
FULL_RECIPES = ["effort"]  # their SFT data differs (effort lines), so they run both stages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="runs/recipes")
    ap.add_argument("--sft-model", default=None)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    torch.set_num_threads(2)
    out = Path(a.out)
    sft_model = a.sft_model
    if sft_model is None:
        sft_cfg = load_config(None, [f"out_dir={out / 'sft'}", "stages=[sft]"])
        Stages(sft_cfg, Reporter(out / "sft", quiet=True)).run()
        sft_model = str(out / "sft" / "sft_model")
    results = {}
    for name in RECIPES + FULL_RECIPES:
        from_sft = [] if name in FULL_RECIPES else [
            "stages=[rl]", f"model.path={sft_model}", "model.preset=null"]
        cfg = load_config(Path("configs") / f"{name}.yaml",
                          [f"out_dir={out / name}", f"rl.steps={a.steps}", *from_sft])
        start = time.time()
        summary = Stages(cfg, Reporter(out / name, quiet=True)).run()
        after_sft = summary.get("eval_after_sft", summary["eval_before"])
        results[name] = {"after_sft": after_sft["accuracy"],
                         "after_rl": summary["eval_after_rl"]["accuracy"],
                         "wall_seconds": round(time.time() - start, 1)}
        print(json.dumps({name: results[name]}), flush=True)
    print(json.dumps({"sft_model": sft_model, "rl_steps": a.steps, "results": results},
                     indent=2))


if __name__ == "__main__":
    main()
