"""Harness search on a run's config: a candidate is the config with its overrides (its
``{candidate}`` directory filled in), evaluated with a fixed model on the first
``search`` held-out tasks (``"search"``) or the ``test`` after them (``"test"``)."""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.config import build_config
from posttrain.config.loading import read_tree
from posttrain.engines import Engine
from posttrain.harness_search import Candidate, HarnessStore, Result
from posttrain.harness_search.loop import Evaluate
from posttrain.recipes.run_tasks import RunTasks
from posttrain.rollout.evaluation import eval_episodes, pass_rates
from posttrain.types import Episode


def harness_evaluator(config: Path, overrides: list[str], store: HarnessStore, engine: Engine,
                      tokenizer, search: int, test: int) -> Evaluate:
    """``evaluate(candidate, split)``: the candidate's accuracy on its split (each task's mean
    over ``eval.samples``), the mean tokens an episode holds, and every episode as a trace."""
    tree = read_tree(config)

    def evaluate(candidate: Candidate, split: str) -> tuple[Result, list[dict]]:
        mine = [f"{k}={json.dumps(v)}" for k, v in store.overrides(candidate).items()]
        cfg = build_config(tree, [*overrides, *mine, f"eval.num_problems={search + test}"])
        parts = RunTasks(cfg)
        parts.attach_judges(tokenizer)
        tasks = parts.eval_tasks[:search] if split == "search" else parts.eval_tasks[search:]
        episodes = eval_episodes(engine, tokenizer, tasks, parts.reward_fn, cfg.eval,
                                       cfg.seed, parts.rollout_fn)
        n, part = cfg.eval.samples, cfg.reward.accuracy_part
        outcomes = pass_rates(episodes, n, part)
        tokens = sum(held(e) for e in episodes) / len(episodes)
        traces = [{"task": i // n, "reference": e.meta.get("reference"), "rewards": e.rewards,
                   "passed": e.rewards[part] >= 1.0, "tokens": held(e),
                   "text": "".join(tokenizer.decode(s.token_ids) for s in e.segments)}
                  for i, e in enumerate(episodes)]
        return Result(sum(outcomes) / len(outcomes), tokens, outcomes), traces

    return evaluate


def held(episode: Episode) -> int:
    """The tokens an episode holds: every segment's, prompt and completion."""
    return sum(len(s.token_ids) for s in episode.segments)
