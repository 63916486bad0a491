"""Synchronous vs asynchronous RL: samples/s and idle fractions. Prints JSON.

(b) ``simulation``: the real ``Dispatcher`` and ``RolloutBuffer`` schedule a simulated engine
and trainer, so the scheduler's effect is measured without two CPU cores' contention.
Completion lengths are log-normal (median ``--median-len``, sigma ``--sigma``, capped at
``--max-len``), fixed per (group, sample) so every mode generates the same work. One engine
with ``--slots`` sequence slots decodes one token a step for every sample in flight, a step
costing ``t0 + t1 * in_flight`` (memory-bound at small batch, compute-bound at large); the
trainer takes ``train_fixed + train_per_token * tokens`` per step and a weight sync pauses
the engine for ``sync_time``. Modes:

- ``sync``: one step's groups at a time; the trainer waits for all of them, the engine for the
  trainer (max_staleness 0, the groups of a step start together).
- ``async``: ``max_staleness`` S, whole groups dispatched when G slots are free, the sync
  waits for the samples in flight to finish (no partial rollout).
- ``async_partial_sample``: S, sample-level dispatch (any free slot takes the next sample),
  partial rollout (the sync pauses the samples in flight; they go on under the new weights).

``max_group_staleness`` is the most versions a trained group's first token lags;
``stale_token_fraction`` the share of trained tokens beyond S, which ``staleness_mask``
removes from the loss.

(a) ``real``: the tiny model on this machine, ``run_rl`` against ``run_async_rl`` (whole
completions, and 8-token chunks with partial rollout) on the arithmetic task with the
quickstart's RL settings; the async runs give the rollout thread and the trainer half the cores
each, as the recipe does. Samples/s over the run, the trainer's idle share (waiting for groups)
and the rollout thread's (nothing in flight).

    python benchmarks/async_vs_sync.py [--steps 40] [--real-steps 12] [--no-real]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher


@dataclass
class SimSettings:
    groups_per_step: int = 32
    group_size: int = 8
    slots: int = 256
    median_len: float = 256.0
    sigma: float = 1.0
    max_len: int = 4096
    t0: float = 1.0
    t1: float = 0.02
    train_fixed: float = 200.0
    train_per_token: float = 0.01
    sync_time: float = 100.0
    seed: int = 0


def sample_length(cfg: SimSettings, group: int, index: int) -> int:
    rng = random.Random(f"{cfg.seed}:{group}:{index}")
    length = cfg.median_len * math.exp(cfg.sigma * rng.gauss(0.0, 1.0))
    return int(min(max(1, round(length)), cfg.max_len))


def simulate(cfg: SimSettings, steps: int, max_staleness: int, sample_dispatch: bool,
             partial: bool, warmup: int = 2) -> dict[str, float]:
    """Run ``steps + warmup`` trainer steps; figures over the last ``steps``."""
    b, g = cfg.groups_per_step, cfg.group_size
    dispatcher = Dispatcher(lambda n: (None, [0] * g), g, b, max_staleness)
    buffer = RolloutBuffer(g)
    remaining: list[int] = []  # tokens left, per sample in flight
    requests: list = []
    versions: list[dict[int, int]] = []  # per sample in flight: tokens sampled per version
    started_version: dict[int, int] = {}
    t = 0.0
    version = 0
    trainer_busy_until: float | None = None
    taken: list[list] = []
    draining = False
    clock = {"trainer_idle": 0.0, "rollout_idle": 0.0, "slot_time": 0.0}
    staleness: list[int] = []
    token_lag = {"stale": 0, "all": 0}
    step = 0
    t_start = 0.0

    def admit() -> None:
        unit = 1 if sample_dispatch else g  # group dispatch: a whole group, or nothing
        while cfg.slots - len(remaining) >= unit:
            for _ in range(unit):
                request = dispatcher.next()
                if request is None:
                    return
                buffer.opened(request.group)
                started_version.setdefault(request.group, version)
                requests.append(request)
                versions.append({})
                remaining.append(sample_length(cfg, request.group, request.index))

    while step < steps + warmup:
        if step == warmup and t_start == 0.0:
            t_start = t
            clock = dict.fromkeys(clock, 0.0)
        if trainer_busy_until is None and buffer.ready() >= b:
            taken = buffer.take(b)
            tokens = sum(sum(per.values()) for group in taken for _, per in group)
            staleness += [version - started_version[group[0][0]] for group in taken]
            for group in taken:
                for _, per in group:
                    token_lag["all"] += sum(per.values())
                    token_lag["stale"] += sum(n for v, n in per.items()
                                              if version - v > max_staleness)
            trainer_busy_until = t + cfg.train_fixed + cfg.train_per_token * tokens
        if trainer_busy_until is not None and t >= trainer_busy_until:
            draining = not partial
            if not remaining or partial:  # the weight sync: the engine pauses
                t += cfg.sync_time
                clock["rollout_idle"] += cfg.sync_time
                version += 1
                dispatcher.release(len(taken))
                trainer_busy_until, draining, taken = None, False, []
                step += 1
                continue
        if not draining:
            admit()
        if remaining:
            dt = cfg.t0 + cfg.t1 * len(remaining)
        else:  # nothing to generate: jump to the trainer's next event
            dt = max(trainer_busy_until - t, 0.0) if trainer_busy_until is not None else 0.0
            if dt == 0.0:
                raise RuntimeError("simulation deadlock: no work and no trainer step")
            clock["rollout_idle"] += dt
        if trainer_busy_until is None or t >= trainer_busy_until:
            clock["trainer_idle"] += dt
        clock["slot_time"] += dt * len(remaining)
        t += dt
        left = np.asarray(remaining) - 1
        keep = []
        for i, r in enumerate(requests):
            versions[i][version] = versions[i].get(version, 0) + 1
            if left[i] > 0:
                keep.append(i)
            else:
                dispatcher.returned(r)
                buffer.add(r, (r.group, versions[i]))
        requests = [requests[i] for i in keep]
        versions = [versions[i] for i in keep]
        remaining = [int(left[i]) for i in keep]
    total = t - t_start
    return {
        "samples_per_s": steps * b * g / total * 1000.0,  # time unit: ms
        "trainer_idle_fraction": clock["trainer_idle"] / total,
        "rollout_idle_fraction": clock["rollout_idle"] / total,
        "slot_occupancy": clock["slot_time"] / (total * cfg.slots),
        "max_group_staleness": max(staleness),
        "stale_token_fraction": token_lag["stale"] / token_lag["all"],
    }


def simulation(steps: int, max_staleness: int) -> dict:
    cfg = SimSettings()
    modes = {
        "sync": simulate(cfg, steps, 0, sample_dispatch=False, partial=False),
        "async": simulate(cfg, steps, max_staleness, sample_dispatch=False, partial=False),
        "async_partial_sample": simulate(cfg, steps, max_staleness, sample_dispatch=True,
                                         partial=True),
    }
    base = modes["sync"]["samples_per_s"]
    for m in modes.values():
        m["speedup_vs_sync"] = m["samples_per_s"] / base
    return {"settings": vars(cfg), "steps": steps, "max_staleness": max_staleness,
            "modes": modes}


def real(steps: int) -> dict:
    """Tiny-model runs of both loops (quickstart RL settings, SFT skipped)."""
    from posttrain.config import ActorConfig, AlgoConfig, EvalConfig, RLConfig
    from posttrain.engines import TorchEngine
    from posttrain.envs import ArithmeticTasks
    from posttrain.models import build_tiny, load_model, load_tokenizer
    from posttrain.recipes import run_rl
    from posttrain.recipes.rl import run_async_rl
    from posttrain.recipes.sampling_loop import RLRun
    from posttrain.reporting import Reporter
    from posttrain.rewards import RewardFunction
    from posttrain.train import Trainer

    tmp = Path(tempfile.mkdtemp())
    model_dir = build_tiny(tmp / "model", "micro", seed=0)
    tokenizer = load_tokenizer(model_dir)
    tasks = ArithmeticTasks(("+", "-"), 2)
    reward = RewardFunction({"correct": ("numeric", 1.0)})
    out = {}
    threads = torch.get_num_threads()
    modes = {"sync": {}, "async": {"mode": "async"},
             "async_partial": {"mode": "async", "async": {"chunk_tokens": 8,
                                                          "partial_rollout": True}}}
    for name, options in modes.items():
        cfg = RLConfig(steps=steps, eval_every=0, **options)
        model = load_model(model_dir)
        engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
        timed = TimedEngine(engine)
        run = run_async_rl if cfg.mode == "async" else run_rl
        # as the recipe does: an in-process rollout thread gets half the cores
        torch.set_num_threads(max(1, threads // 2) if cfg.mode == "async" else threads)
        start = time.perf_counter()
        run(RLRun(Trainer(model, cfg.optim, steps), tokenizer, tasks, [], reward, EvalConfig(),
                  "correct", Reporter(tmp / name, quiet=True), cfg=cfg, algo=AlgoConfig(),
                  actor=ActorConfig()), timed)
        wall = time.perf_counter() - start
        torch.set_num_threads(threads)
        lines = (tmp / name / "metrics.jsonl").read_text().splitlines()
        log = [json.loads(line) for line in lines]
        samples = steps * cfg.prompts_per_step * cfg.group_size
        if cfg.mode == "async":
            trainer_idle = sum(r["async/trainer_wait_s"] for r in log) / wall
            rollout_idle = sum(r["async/rollout_idle_s"] for r in log) / wall
        else:  # one thread: the trainer waits while generating, the engine while training
            trainer_idle = timed.seconds / wall
            rollout_idle = 1 - trainer_idle
        out[name] = {"samples_per_s": samples / wall, "wall_s": wall,
                     "trainer_idle_fraction": trainer_idle,
                     "rollout_idle_fraction": rollout_idle,
                     "mean_staleness": sum(r.get("staleness/mean", 0) for r in log) / len(log)}
    for name in out:
        out[name]["speedup_vs_sync"] = out[name]["samples_per_s"] / out["sync"]["samples_per_s"]
    return {"model": "micro", "steps": steps, "prompts_per_step": 16, "group_size": 8,
            "max_new_tokens": 32, "threads": threads, "modes": out}


class TimedEngine:
    """Counts the seconds spent in ``generate``; everything else passes through."""

    def __init__(self, engine) -> None:
        self.engine, self.seconds = engine, 0.0

    def generate(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self.engine, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="simulated trainer steps")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--real-steps", type=int, default=12)
    parser.add_argument("--no-real", action="store_true", help="skip the tiny-model runs")
    args = parser.parse_args()
    result = {"simulation": simulation(args.steps, args.max_staleness)}
    if not args.no_real:
        result["real"] = real(args.real_steps)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
