"""Skills on a laptop CPU: train with a skill bank in context, let a teacher evolve it, and
measure what the skills are worth (SkillsBench's protocol).

1. SFT then GRPO a tiny model on 2-digit addition (examples/skills/skills.yaml): every
   episode opens with the skills the bank has for it. With --evolve, every 5 RL steps the
   scripted teacher (teacher.py) distils failed episodes into lessons and successful ones
   into skills (SkillRL).
2. Play the held-out problems with the trained model in three conditions: no skills, the
   run's bank, and a skill the model writes itself first; print the pass rates and the
   normalised gain g = (P_skill - P_vanilla) / (1 - P_vanilla).

    python examples/skills/run.py [--out runs/skills] [--evolve] [overrides ...]

Writes ``skills_bench.json`` (the protocol's report and the wall time) into ``--out``.
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
from posttrain.features.skills.run import run_skills_bench
from posttrain.models import load_model, load_tokenizer
from posttrain.recipes import train
from posttrain.recipes.build import RunParts

CONFIG = Path(__file__).with_name("skills.yaml")
EVOLVE = ["skills.teacher.function=examples/skills/teacher.py:teach", "skills.evolve_every=5",
          "skills.per_round=2", "skills.evolve_below=0.95"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/skills")
    parser.add_argument("--evolve", action="store_true",
                        help="the scripted teacher evolves the bank during RL")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    cfg = load_config(CONFIG, [f"out_dir={args.out}", *(EVOLVE if args.evolve else []),
                               *args.overrides])
    started = time.time()
    train(cfg)
    trained = time.time() - started
    model_dir = Path(args.out) / f"{cfg.stages[-1]}_model"
    tokenizer = load_tokenizer(model_dir)
    engine = TorchEngine(load_model(model_dir), tokenizer.pad_token_id, tokenizer.eos_token_id)
    report = run_skills_bench(RunParts(cfg), engine, tokenizer)
    report["seconds"] = {"training": trained, "protocol": time.time() - started - trained}
    (Path(args.out) / "skills_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    table = Table(title=f"SkillsBench protocol, {report['tasks']} held-out problems")
    for column in ("condition", "pass", "± s.e.", "delta", "g", "better", "worse"):
        table.add_column(column, justify="left" if column == "condition" else "right")
    for name, c in report["conditions"].items():
        gain = c.get("gain")
        table.add_row(name, f"{c['pass']:.3f}", f"{c['stderr']:.3f}",
                      f"{c['delta']:+.3f}" if "delta" in c else "",
                      "" if gain is None else f"{gain:+.3f}",
                      str(c.get("tasks_better", "")), str(c.get("tasks_worse", "")))
    Console().print(table)


if __name__ == "__main__":
    main()
