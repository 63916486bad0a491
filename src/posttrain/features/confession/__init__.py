"""Confessions (``reward.confession``; docs/confessions.md): after its answer the policy
confesses whether it followed the task, a judge scores the confession, and the confession's
tokens train on their own advantage (the catalogue's ``confession``), the answer's on the
task's. SFT data can carry the form (``sft.confessions``)."""

from posttrain.hooks import Feature

FEATURE = Feature("confession", order=40, package=__name__,
                  advantages=".advantage:confession_advantages",
                  wrap_rollout=".rollout:confessing", sft_turns=".sft:confession_turns")
