"""Effort control (``task.efforts``; docs/algorithms.md, reward shaping): every prompt carries
a ``Reasoning Effort`` system line, asked at each level in RL and on-policy distillation (one
group per (prompt, effort)), at a random level in generated SFT data and at the highest in
evaluation; the ``effort_length_penalty`` shaping rule reads each episode's level."""

from posttrain.hooks import Feature

FEATURE = Feature("effort", order=5, package=__name__, prepare_tasks=".task:with_efforts",
                  shaping_inputs=".shaping:effort_levels", check=".rules:check",
                  refuses={"async": "rl.mode=async does not ask prompts at several "
                                    "task.efforts; use rl.mode=sync"},
                  active=".rules:active")
