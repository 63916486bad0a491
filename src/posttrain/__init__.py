"""posttrain: post-train language models into reasoning and agentic models.

Layers import only downward (see docs/architecture.md):
types -> algos -> models -> engines/rewards -> envs -> train -> pipelines -> cli/config.
"""

__version__ = "0.1.0"
