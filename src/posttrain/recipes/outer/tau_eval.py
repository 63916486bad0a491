"""tau-bench evaluation (TAU_ENV.md §9.5): every task of a split played ``trials`` times by the
agent (through the agent loop) against its simulated user; pass^k for k = 1..n, the average
reward and the termination reasons. Episodes whose scoring hit an infrastructure error are
left out of every figure and counted apart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace

from posttrain.algos.metrics import pass_hat_k
from posttrain.config import LoopLimits
from posttrain.config.sections.reward import ENV
from posttrain.engines import Engine
from posttrain.envs.tau.rl import TauPrompt, TauTasks
from posttrain.harness import ToolRegistry
from posttrain.rewards import RewardFunction
from posttrain.rollout.agent import AgentRollout
from posttrain.types import Episode, SamplingParams

TAU_REWARD = RewardFunction({"tau": (ENV, 1.0), "success": (ENV, 0.0)})  # TAU_PARTS


def play(engine: Engine, tokenizer, tasks: TauTasks, prompts: Sequence[TauPrompt],
         trials: int, limits: LoopLimits, sampling: SamplingParams, batch: int = 8,
         retain_reasoning: str = "keep_all") -> Iterator[Episode]:
    """Episodes of every prompt, ``trials`` times (trial t samples with seed ``seed + t``), in
    lockstep batches of ``batch`` conversations; ``meta["trial"]`` is set. The agent's earlier
    reasoning follows ``retain_reasoning`` when the user speaks (``AgentLoop``)."""
    rollout = AgentRollout(ToolRegistry(), limits, env_factory=tasks.make_env,
                           retain_reasoning=retain_reasoning)
    for trial in range(trials):
        trial_sampling = replace(sampling, seed=(sampling.seed or 0) + trial)
        for start in range(0, len(prompts), batch):
            for episode in rollout(engine, tokenizer, prompts[start:start + batch], TAU_REWARD,
                                   trial_sampling, group_prefix=f"t{trial}:{start}:"):
                episode.meta["trial"] = trial
                yield episode


def summarize(episodes: Sequence[Episode]) -> dict:
    """pass^k (k = 1..fewest scored trials of any task), the average reward and the reward
    bases of the scored episodes; termination counts of every episode (the agent loop's own
    stops and the infrastructure errors included)."""
    scored = [e for e in episodes if not e.meta["env"]["infrastructure_error"]]
    by_task: dict[str, list[bool]] = {}
    for e in scored:
        by_task.setdefault(e.meta["env"]["task_id"], []).append(bool(e.rewards["success"]))
    n = [len(v) for v in by_task.values()]
    c = [sum(v) for v in by_task.values()]
    trials = min(n, default=0)
    bases = Counter(" x ".join(b) for e in scored if (b := e.meta["env"]["basis"]))
    unavailable = sorted({u for e in scored for u in e.meta["env"]["unavailable"] or []})
    return {"tasks": len(by_task), "episodes": len(scored),
            "infrastructure_errors": len(episodes) - len(scored),
            "avg_reward": sum(e.rewards["tau"] for e in scored) / max(len(scored), 1),
            "pass_hat_k": {k: pass_hat_k(n=n, c=c, k=k) for k in range(1, trials + 1)},
            "terminations": dict(Counter(e.meta["env"]["termination"] or e.finish_reason
                                         for e in episodes)),
            "reward_basis": dict(bases), "unavailable": unavailable}
