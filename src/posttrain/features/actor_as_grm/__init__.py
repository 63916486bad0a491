"""The actor as a generative reward model (``rl.actor_as_grm``; docs/reward_models.md): its
grading episodes are set aside from the task's metrics and reported on their own; SFT data can
carry grading prompts (``sft.gradings``)."""

from posttrain.hooks import Feature

FEATURE = Feature("actor_as_grm", order=50, package=__name__,
                  set_aside=".metrics:is_grading", rollout_metrics=".metrics:grading_metrics",
                  sft_conversations=".sft:grading_prompts")
