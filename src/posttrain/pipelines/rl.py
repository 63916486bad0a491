"""Synchronous RL (GRPO by default): prompts -> G completions each -> rewards -> advantages ->
update -> weight sync to the engine -> periodic eval.

Step ``k`` draws its prompts and sampling seed from ``(seed, k)`` alone, so the step number is
the data cursor and a resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import torch

from posttrain.algos import get
from posttrain.engines import Engine
from posttrain.envs import EffortTask
from posttrain.pipelines.agent_rollout import tool_use_rate
from posttrain.pipelines.evaluation import evaluate
from posttrain.pipelines.judging import missing_metrics
from posttrain.pipelines.rl_run import RLRun
from posttrain.pipelines.rollout import rollout
from posttrain.pipelines.shaping import shape_rewards
from posttrain.pipelines.weight_sync import sync_weights
from posttrain.types import Episode, SamplingParams, write_episodes


class MismatchError(RuntimeError):
    """Engine and trainer log-probs of the same tokens disagree beyond tolerance."""


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) % 2**62


def rollout_metrics(episodes: Sequence[Episode], accuracy_part: str) -> dict[str, float]:
    n = len(episodes)
    out = {"reward": sum(e.reward for e in episodes) / n}
    for name in episodes[0].rewards:
        out[f"reward/{name}"] = sum(e.rewards[name] for e in episodes) / n
    out["accuracy"] = out[f"reward/{accuracy_part}"]
    out["response_length"] = sum(e.segments[0].num_trainable for e in episodes) / n
    out["truncated"] = sum(e.finish_reason in ("length", "max_tokens") for e in episodes) / n
    out |= missing_metrics(episodes)
    if any("tool_records" in e.meta for e in episodes):
        out["tool_use"] = tool_use_rate(episodes)
        for key in ("turns", "compactions", "guard_flags", "guard_blocks"):
            out[key] = sum(e.meta[key] for e in episodes) / n
    return out


def check_mismatch(value: float, tolerance: float) -> None:
    """``value`` is the mean |trainer - engine| log-prob of the sampled tokens (the update's
    ``mismatch`` metric); above ``tolerance`` the engine is not sampling from the policy."""
    if value > tolerance:
        raise MismatchError(
            f"train/inference log-prob mismatch {value:.4g} > rl.mismatch_tolerance={tolerance}"
        )


def informative(episodes: list[Episode]) -> list[Episode]:
    """The episodes of groups whose rewards are not all equal (``dynamic_sampling``)."""
    if not episodes:
        return []
    groups = {g: i for i, g in enumerate(dict.fromkeys(e.group_id for e in episodes))}
    keep = get("shaping", "dynamic_sampling")(
        rewards=torch.tensor([e.reward for e in episodes]),
        group_ids=torch.tensor([groups[e.group_id] for e in episodes]))
    return [e for e, k in zip(episodes, keep.tolist()) if k]


def run_rl(
    run: RLRun,
    engine: Engine,
    efforts: Sequence[int] | None = None,
    rollout_fn: Callable[..., list[Episode]] = rollout,
) -> list[dict[str, float]]:
    """Run ``run``'s steps synchronously; returns the evaluations made. With ``efforts`` every
    prompt is asked at each level, one group per (prompt, effort); ``rollout_fn`` (``rollout``
    or an ``AgentRollout``) plays the episodes."""
    cfg, algo, tokenizer, seed = run.cfg, run.algo, run.tokenizer, run.seed
    truncating = cfg.top_p < 1 or cfg.top_k > 0
    update = run.policy_update()
    groups_per_prompt = len(efforts) if efforts else 1
    target_groups = cfg.prompts_per_step * groups_per_prompt
    evals = []
    run.reporter.start("RL", cfg.steps)
    for step in range(run.start_step, cfg.steps):

        def sample(n: int, round_: int) -> list[Episode]:
            problems = run.tasks.sample(n, random.Random(f"{seed}:rl:{step}:{round_}"))
            if efforts:  # one group per (prompt, effort)
                problems = [EffortTask(p, b) for p in problems for b in efforts]
            sampling = SamplingParams(
                max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                top_p=cfg.top_p, top_k=cfg.top_k, stop_token_ids=(tokenizer.eos_token_id,),
                seed=step_seed(seed, step) + round_,
            )
            episodes = rollout_fn(engine, tokenizer, problems, run.reward_fn, sampling,
                                  cfg.group_size, group_prefix=f"{round_}-")
            return shape_rewards(episodes, run.shaping, step, efforts)

        first = sample(cfg.prompts_per_step, 0)
        if cfg.save_episodes:
            write_episodes(run.reporter.path.parent / "episodes.jsonl", first, append=True)
        metrics = rollout_metrics(first, run.accuracy_part)
        episodes = first
        if algo.dynamic_sampling.enabled:
            episodes, extra = informative(first), 0
            if algo.dynamic_sampling.mode == "resample":
                for round_ in range(1, algo.dynamic_sampling.max_rounds + 1):
                    missing = target_groups - len(episodes) // cfg.group_size
                    if missing <= 0:
                        break
                    more = sample(math.ceil(missing / groups_per_prompt), round_)
                    extra += len(more)
                    episodes += informative(more)
                episodes = episodes[: target_groups * cfg.group_size]
            metrics["extra_generations"] = float(extra)
            metrics["kept_groups"] = float(len(episodes) // cfg.group_size)
        if episodes:
            metrics |= update(episodes)
            if truncating:  # behaviour log-probs are of the truncated distribution
                del metrics["mismatch"]
            else:
                check_mismatch(metrics["mismatch"], cfg.mismatch_tolerance)
            probes = [s.token_ids for e in episodes for s in e.segments][: cfg.sync.probes]
            metrics |= sync_weights(run.trainer, engine, step + 1, probes, cfg.sync).metrics()
        if run.eval_due(step):
            result = evaluate(engine, tokenizer, run.eval_tasks, run.reward_fn, run.eval_cfg,
                              run.accuracy_part, rollout_fn=rollout_fn)
            metrics |= {f"eval/{k}": v for k, v in result.items()}
            evals.append({"step": step + 1, **result})
        run.finish_step(step, metrics)
    run.reporter.finish()
    return evals
