"""The actor as a generative reward model (``rl.actor_as_grm``; DeepSeek-V4 technical report,
2026; docs/reward_models.md): after each RL step's rollout the policy grades some of its
episodes and is rewarded for agreeing with their verifiable outcomes; every evaluation reports
its grading accuracy; its gradings are set aside from the task's metrics and reported on their
own; SFT data can carry grading prompts (``sft.gradings``)."""

from posttrain.hooks import Feature

FEATURE = Feature("actor_as_grm", order=50, package=__name__,
                  set_aside=".metrics:is_grading", rollout_metrics=".metrics:grading_metrics",
                  wrap_training_rollout=".stage:grading_rollout",
                  eval_watch=".stage:grading_accuracy", sft_conversations=".sft:grading_prompts")
