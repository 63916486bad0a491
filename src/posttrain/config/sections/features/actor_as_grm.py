"""The actor as a generative reward model (``rl.actor_as_grm``; DeepSeek-V4 technical
report, 2026; docs/reward_models.md): grading prompts mixed into RL."""

from __future__ import annotations

from pydantic import Field

from posttrain.algos.registry import facts
from posttrain.config.section import Section

GRADING_PART = "grading"  # the reward part of a grading episode: its grade's agreement
GRADING_RUBRIC = "Is the response's final answer correct? Grade it high if so, low if not."


class ActorAsGRM(Section):
    """After each step's rollout, ``share`` x ``rl.prompts_per_step`` of its episodes (at least
    one), as many right as wrong by ``reward.accuracy_part`` where the step has both (then at
    most twice the smaller side), become grading prompts: the ``score`` judge's prompt with
    ``rubric`` on ``0..score_max``. The policy grades each ``rl.group_size`` times in at most
    ``max_new_tokens`` tokens and earns the catalogue's ``actor_as_grm``: 1 when its grade
    falls on the outcome's side of ``score_max / 2``, else 0 (no grade: 0). Every evaluation
    also has the policy grade the held-out episodes greedily: ``grading_accuracy``."""

    share: float = Field(
        0.25, gt=0, le=1,
        description="grading prompts a step, as a share of rl.prompts_per_step, in (0, 1]")
    rubric: str = Field(GRADING_RUBRIC, min_length=1,
                        description="the grading rubric of the score judge's prompt")
    score_max: float = Field(10.0, gt=0, description="the top of the grading scale 0..score_max")
    max_new_tokens: int = Field(16, ge=1, description="most tokens of a grade")

    def check(self, cfg) -> None:
        """Grading prompts need a verifiable outcome (the feature refuses agent tasks, async
        runs and several trainer processes; the estimator's own check refuses one that reads
        reward parts)."""
        accuracy = cfg.reward.parts.get(cfg.reward.accuracy_part)
        refused = [
            (accuracy is None or accuracy.verifier == "judge",
             f"reward.accuracy_part ({cfg.reward.accuracy_part}) must be a verifiable part, "
             "not a judge's: its outcome is what a grade must agree with"),
            (bool(cfg.reward.shaping), "reward.shaping would reshape the grades' rewards too"),
            (cfg.algo.dynamic_sampling.enabled and cfg.algo.dynamic_sampling.mode == "resample",
             "algo.dynamic_sampling mode resample would count the grading groups as the "
             "task's; use mode drop"),
            (cfg.reward.confession is not None, "reward.confession and rl.actor_as_grm do not "
                                                "combine"),
            ("baseline_rewards" in facts("advantage", cfg.algo.adv_estimator).parameter_names(),
             f"algo.adv_estimator={cfg.algo.adv_estimator} needs each prompt's greedy decode, "
             "which grading prompts do not get"),
        ]
        for bad, why in refused:
            if bad:
                raise ValueError(f"rl.actor_as_grm: {why}")
