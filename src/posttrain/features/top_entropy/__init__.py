"""``algo.top_entropy`` (arXiv 2506.01939): only the highest-entropy tokens of a step keep
their advantage; it needs the rollout policy's token entropy (a no-gradient pass)."""

from posttrain.hooks import Feature

FEATURE = Feature("top_entropy", order=20, package=__name__,
                  advantages=".modifier:forking_advantages", needs_old_entropy=".modifier:enabled")
