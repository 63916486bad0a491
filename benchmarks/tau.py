"""tau-bench environment cost: per domain, the seconds of a fresh environment in a task's
initial state, of a database hash, and of a whole gold check (live replay of the gold actions,
the strict replay that scoring does, and the gold target). No model is involved; prints JSON.

    python benchmarks/tau.py [--tasks 20]
"""

from __future__ import annotations

import argparse
import json
import time

from posttrain.envs.tau.environment import build
from posttrain.envs.tau.gold import gold_check
from posttrain.envs.tau.tasks import load_tasks


def seconds(fn, tasks) -> float:
    start = time.perf_counter()
    for t in tasks:
        fn(t)
    return (time.perf_counter() - start) / len(tasks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20, help="tasks per domain (first N)")
    args = parser.parse_args()
    out = {}
    for domain in ("mock", "retail", "telecom"):
        tasks = load_tasks(domain)[: args.tasks]
        build(tasks[0], domain)  # loads and caches the pristine databases
        out[domain] = {
            "tasks": len(tasks),
            "build_s": seconds(lambda t: build(t, domain), tasks),
            "hash_s": seconds(lambda t: build(t, domain).hashes(), tasks),
            "gold_check_s": seconds(lambda t: gold_check(t, domain), tasks),
        }
        out[domain]["hash_s"] -= out[domain]["build_s"]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
