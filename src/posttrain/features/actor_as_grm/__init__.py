"""The actor as a generative reward model (``rl.actor_as_grm``; DeepSeek-V4 technical report,
2026; docs/reward_models.md): after each RL step's rollout the policy grades some of its
episodes and is rewarded for agreeing with their verifiable outcomes; every evaluation reports
its grading accuracy; its gradings are set aside from the task's metrics and reported on their
own; SFT data can carry grading prompts (``sft.gradings``)."""

from posttrain.hooks import Feature

FEATURE = Feature("actor_as_grm", order=50, package=__name__,
                  set_aside=".metrics:is_grading", rollout_metrics=".metrics:grading_metrics",
                  wrap_training_rollout=".stage:grading_rollout",
                  eval_watch=".stage:grading_accuracy", sft_conversations=".sft:grading_prompts",
                  active=".rules:active", refuses={
                      "agent": "rl.actor_as_grm: task.name={cfg.task.name} is an agent task; "
                               "grading prompts are built from single-turn episodes",
                      "async": "rl.actor_as_grm: grading prompts follow each synchronous "
                               "rollout: use rl.mode=sync",
                      "processes": "rl.actor_as_grm: the grading prompts are built in one "
                                   "trainer process: set dist.trainer_processes=1"})
