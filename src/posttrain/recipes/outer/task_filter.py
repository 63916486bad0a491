"""Filtering synthesised tasks with a solver pool (docs/synthesis.md): every solver plays each
task ``k`` times through the agent loop, with the task's tools and verifier (DeepSeek V3.2
keeps a task only if pass@100 > 0). A task is dropped when no solver ever passes; with
``require_failure``, also when every solver passes every time (nothing to learn); and when a
closed-book solver (shown no tools: DeepSeek's search tasks keep an item only if every
candidate agent fails without the search) answers it. A kept task gets its pass rates and
``difficulty`` (1 minus the pool's mean pass rate) in ``meta``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from posttrain.config import LoopLimits
from posttrain.config.sections.reward import ENV
from posttrain.engines.sampling import derived_seed
from posttrain.envs.tool_env import ToolEnvEpisode, ToolEnvFiles, ToolEnvProblem
from posttrain.harness import ToolRegistry
from posttrain.rewards import RewardFunction
from posttrain.rollout.agent import AgentRollout
from posttrain.synthesis.out_dir import resumable
from posttrain.types import SamplingParams

CORRECT = RewardFunction({"correct": (ENV, 1.0)})


@dataclass(frozen=True)
class Solver:
    """A model of the pool: its name (in reports), engine and tokenizer."""

    name: str
    engine: object
    tokenizer: object


class ClosedBook(ToolEnvEpisode):
    """A task's verdict without its tools: the question answered from what the model knows."""

    def __init__(self, problem: ToolEnvProblem) -> None:
        super().__init__(problem)
        self.tools = ToolRegistry()


def pass_counts(solver: Solver, problems: Sequence[ToolEnvProblem], k: int,
                sampling: SamplingParams, limits: LoopLimits, closed_book: bool = False
                ) -> dict[str, int]:
    """Task id -> how many of ``k`` episodes of ``solver`` the verifier accepted."""
    by_id = {p.reference: p for p in problems}
    make = ClosedBook if closed_book else ToolEnvEpisode
    rollout = AgentRollout(ToolRegistry(), limits, env_factory=lambda ref: make(by_id[ref]))
    episodes = rollout(solver.engine, solver.tokenizer, list(problems), CORRECT, sampling,
                       group_size=k)  # task i's episodes have group id str(i)
    counts = dict.fromkeys(by_id, 0)
    for e in episodes:
        counts[problems[int(e.group_id)].reference] += int(e.rewards.get("correct") == 1.0)
    return counts


def filter_tasks(problems: Sequence[ToolEnvProblem], solvers: Sequence[Solver], k: int,
                 closed_book: Sequence[Solver] = (), require_failure: bool = False,
                 sampling: SamplingParams = SamplingParams(temperature=1.0, max_new_tokens=64),
                 limits: LoopLimits = LoopLimits(max_turns=6)
                 ) -> tuple[dict[str, dict], dict[str, str]]:
    """``(kept: id -> meta to add, dropped: id -> reason)`` (module docstring)."""
    rates = {s.name: pass_counts(s, problems, k, sampling, limits) for s in solvers}
    known = {s.name: pass_counts(s, problems, k, sampling, limits, closed_book=True)
             for s in closed_book}
    kept, dropped = {}, {}
    for p in problems:
        passes = {name: counts[p.reference] for name, counts in rates.items()}
        without = [name for name, counts in known.items() if counts[p.reference]]
        if not any(passes.values()):
            dropped[p.reference] = f"no solver passed in {k} tries"
        elif require_failure and all(n == k for n in passes.values()):
            dropped[p.reference] = f"every solver passed all {k} tries"
        elif without:
            dropped[p.reference] = f"answered without tools by {', '.join(without)}"
        else:
            mean = sum(passes.values()) / (k * len(passes))
            kept[p.reference] = {"pass_rates": {n: c / k for n, c in passes.items()},
                                 "difficulty": round(1 - mean, 4)}
    return kept, dropped


def filter_into(out: Path, problems: Sequence[ToolEnvProblem], solvers: Sequence[Solver],
                k: int, closed_book: Sequence[Solver], require_failure: bool,
                sampling: SamplingParams, limits: LoopLimits, batch: int = 32,
                progress: Callable[[int], None] | None = None) -> dict:
    """``filter_tasks`` ``batch`` tasks at a time (a batch samples with a seed derived from
    its first task's position); the kept tasks are copied to ``out/<id>/`` with their meta,
    each task's row goes to the journal as its batch is done (the rows there already, an
    interrupted filter's, are not played again: ``synthesis.out_dir``), and the report
    (returned) to ``out/filter_report.json``."""
    by_id = {p.reference: p for p in problems}
    ids = list(by_id)
    out.mkdir(parents=True, exist_ok=True)

    def judge(part: Sequence[str]) -> list[dict]:
        seed = None if sampling.seed is None else derived_seed(sampling.seed, ids.index(part[0]))
        kept, dropped = filter_tasks([by_id[i] for i in part], solvers, k, closed_book,
                                     require_failure, replace(sampling, seed=seed), limits)
        for i, meta in kept.items():
            env = by_id[i].env
            spec = {**env.spec, "meta": {**env.spec.get("meta", {}), **meta}}
            ToolEnvFiles({**env.files, "env.json": json.dumps(spec)}).save(out / i)
        return [{"task": i, "kept": i, **kept[i]} if i in kept
                else {"task": i, "kept": None, "dropped": dropped[i]} for i in part]

    rows = resumable(out, "task", ids, judge, chunk=batch, progress=progress)
    difficulty = [r["difficulty"] for r in rows if r["kept"] is not None]
    reasons = [r["dropped"] for r in rows if r["kept"] is None]
    report = {"tasks": len(rows), "kept": len(difficulty),
              "dropped": {r: reasons.count(r) for r in sorted(set(reasons))},
              "mean_difficulty": round(sum(difficulty) / len(difficulty), 4) if difficulty
              else None,
              "per_task": {r["task"]: {k_: v for k_, v in r.items() if k_ not in ("task", "kept")}
                           for r in rows}}
    (out / "filter_report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
