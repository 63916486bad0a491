"""Two experts, one student: multi-teacher on-policy distillation on a laptop CPU.

1. SFT a tiny model on imperfect addition and subtraction (the student's starting point).
2. RL one expert per domain from it: addition only, subtraction only.
3. Distil both experts into the SFT model by on-policy distillation (configs/opd.yaml): the
   student samples, each sample is scored by its domain's expert, full-vocabulary reverse KL.
4. Evaluate every model on the same held-out problems, per domain, and print the table.

    python examples/multi_teacher_opd.py [--out runs/multi_teacher_opd] [--loss full_vocab_rkl]

Writes ``results.json`` (the table, the wall time of each phase) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from posttrain.config import load_config
from posttrain.engines import TorchEngine
from posttrain.models import load_model, load_tokenizer
from posttrain.recipes import train
from posttrain.recipes.stages import Recipe

DOMAINS = {"addition": "+", "subtraction": "-"}


def run(config: str | None, overrides: list[str]) -> float:
    """Run a recipe; its wall time in seconds."""
    start = time.time()
    train(load_config(config, overrides))
    return time.time() - start


def held_out(model_dir: Path, recipe: Recipe) -> dict[str, float]:
    """Greedy accuracy of ``model_dir`` on the recipe's held-out problems, per domain."""
    tokenizer = load_tokenizer(model_dir)
    engine = TorchEngine(load_model(model_dir), tokenizer.pad_token_id, tokenizer.eos_token_id)
    result = recipe.evaluate(engine, tokenizer)
    return {d: result[f"accuracy/{d}"] for d in DOMAINS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/multi_teacher_opd")
    parser.add_argument("--loss", default="full_vocab_rkl",
                        choices=["full_vocab_rkl", "opd_sampled", "opd_clip", "mopd"])
    args = parser.parse_args()
    out = Path(args.out)
    sft = out / "sft" / "sft_model"
    seconds = {"sft": run(None, [f"out_dir={out / 'sft'}", "stages=[sft]",
                                 "task.ops=[+, '-']", "sft.steps=1000"])}
    for domain, op in DOMAINS.items():
        seconds[f"teacher_{domain}"] = run(None, [
            f"out_dir={out / f'teacher_{domain}'}", "stages=[rl]", f"model.path={sft}",
            "model.preset=null", f"task.ops=['{op}']", "rl.steps=100", "rl.eval_every=50"])
    teachers = ", ".join(f"{{path: {out / f'teacher_{d}' / 'rl_model'}, domains: [{d}]}}"
                         for d in DOMAINS)
    student = out / "student"
    seconds["opd"] = run("configs/opd.yaml", [
        f"out_dir={student}", f"model.path={sft}", f"opd.teachers=[{teachers}]",
        f"opd.loss={args.loss}"])
    recipe = Recipe(load_config("configs/opd.yaml", [f"out_dir={student}",
                                                     f"model.path={sft}"]))
    rows = {"teacher": {d: held_out(out / f"teacher_{d}" / "rl_model", recipe)[d]
                        for d in DOMAINS},
            "student before": held_out(sft, recipe),
            "student after": held_out(student / "opd_model", recipe)}
    rows["after / teacher"] = {d: rows["student after"][d] / rows["teacher"][d]
                               for d in DOMAINS}
    table = Table(title=f"multi-teacher OPD ({args.loss}), held-out greedy accuracy")
    table.add_column("domain")
    for name in rows:
        table.add_column(name, justify="right")
    for d in DOMAINS:
        table.add_row(d, *[f"{rows[name][d]:.3f}" for name in rows])
    Console().print(table)
    total = sum(seconds.values())
    print(f"wall time {total:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    (out / "results.json").write_text(json.dumps(
        {"loss": args.loss, "accuracy": rows, "seconds": seconds, "total_seconds": total},
        indent=2))


if __name__ == "__main__":
    main()
