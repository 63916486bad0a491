"""The actor as a GRM in the RL stage: grading prompts after each step's rollout, and the
policy's grading accuracy at every evaluation."""

from __future__ import annotations

from collections.abc import Callable

from posttrain.features.actor_as_grm.grading import GradingAccuracy, GradingRollout
from posttrain.rollout.evaluation import eval_episodes


def grading_rollout(rollout_fn: Callable, cfg, run) -> Callable:
    """``rollout_fn`` followed by the policy's gradings of some of its episodes
    (``rl.actor_as_grm``; never at evaluation); itself when off."""
    grm = cfg.rl.actor_as_grm
    return rollout_fn if grm is None else GradingRollout(rollout_fn, grm, run.accuracy_part,
                                                         run.seed)


def grading_accuracy(parts, run, engine, evals: dict) -> GradingAccuracy | None:
    """``rl.actor_as_grm``'s evaluation: the policy on ``engine`` grades the held-out
    episodes; the stage's starting policy's figures go to ``evals["grading_before_rl"]``
    (once: a resumed run keeps them)."""
    grm = parts.cfg.rl.actor_as_grm
    if grm is None:
        return None
    watch = GradingAccuracy(grm, parts.cfg.reward.accuracy_part, run.tokenizer, run.eval_tasks,
                            engine)
    if "grading_before_rl" not in evals:
        evals["grading_before_rl"] = watch(eval_episodes(
            engine, run.tokenizer, run.eval_tasks, run.reward_fn, run.eval_cfg, run.seed,
            parts.rollout_fn))
    return watch
