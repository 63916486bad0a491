"""An orchestrator that learns to spawn: agent swarms (Kimi K2.5's PARL) on a laptop CPU.

configs/swarm.yaml: SFT a tiny model on the lookup family (the codes of 2-4 names, each in a
long record; the orchestrator's context holds three records, so four names only fit when
sub-agents read them), then GRPO with PARL's reward. Prints, every few RL steps, how often the
orchestrator spawned, how many sub-agents, the critical steps (the cost: the longest chain)
against all steps, and the accuracy.

    python examples/swarm/run.py [--out runs/swarm] [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from posttrain.config import load_config
from posttrain.recipes import train

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "swarm.yaml"
SHOWN = ("swarm/spawning", "swarm/subagents", "swarm/critical_steps", "swarm/total_steps",
         "accuracy", "reward")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/swarm")
    parser.add_argument("--every", type=int, default=5, help="average over this many steps")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    started = time.time()
    train(load_config(CONFIG, [f"out_dir={args.out}", *args.overrides]))
    rows = [r for r in map(json.loads, (Path(args.out) / "metrics.jsonl").open())
            if r.get("stage") == "rl"]
    table = Table(title=f"RL on the lookup family ({time.time() - started:.0f} s in all)")
    table.add_column("steps")
    for key in SHOWN:
        table.add_column(key.removeprefix("swarm/"), justify="right")
    for i in range(0, len(rows), args.every):
        chunk = rows[i:i + args.every]
        table.add_row(f"{chunk[0]['step']}-{chunk[-1]['step']}",
                      *(f"{sum(r[k] for r in chunk) / len(chunk):.2f}" for k in SHOWN))
    Console().print(table)


if __name__ == "__main__":
    main()
