"""posttrain: post-train language models into reasoning and agentic models.

Layers import only downward (docs/architecture.md has the table and the picture): types ->
algos -> models, settings -> engines, rewards -> harness -> envs -> data -> rollout, train ->
cluster, config -> recipes -> cli.

Importing posttrain before torch sets ``GOMP_SPINCOUNT=3000`` unless it is set: an OpenMP
thread without work then sleeps after a short spin instead of spinning for milliseconds, which
beside another busy PyTorch process made GRPO steps up to 14x slower than on a quiet machine
(docs/performance.md, "A busy machine").
"""

import os

os.environ.setdefault("GOMP_SPINCOUNT", "3000")

__version__ = "0.1.0"
