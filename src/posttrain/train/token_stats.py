"""Per-token statistics at the rollout's weights: the log-prob and entropy of each sampled
token under the trainer (an entropy-aware modifier's ``p_t`` and ``H_t``), and the few
episodes a step records them on for ``posttrain view``."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import torch

from posttrain.train.protocol import PolicyTrainer
from posttrain.train.trainer import Trainer
from posttrain.types import Batch, Episode


def old_token_stats(trainer: Trainer, batch: Batch, temperature: float, top_k: int,
                    top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs, entropies)`` ``[B, T]`` of ``batch``'s loss-mask tokens at the current
    (rollout) weights over the sampling support (``temperature``, ``top_k``, ``top_p``), no
    gradient, in one pass."""
    stats = trainer.score_tokens(batch, trainer.model, lambda mb: torch.stack(
        trainer.token_logprobs(trainer.model, mb, temperature, True, top_k, top_p), dim=-1))
    return stats[..., 0], stats[..., 1]


def record_token_stats(trainer: PolicyTrainer, episodes: Sequence[Episode], batch: Batch,
                       count: int, temperature: float, top_k: int, top_p: float) -> None:
    """``count`` episodes of the step, evenly spaced, get ``meta["token_stats"]``: per
    segment, each token's advantage (``batch.advantages``) and its log-prob and entropy (of
    the sampling distribution, nats) under the trainer's weights before the update (the
    weights that sampled it, synchronous RL), 0 where the token is not trained; what
    ``posttrain view`` colours tokens by."""
    starts = [0, *accumulate(len(episode.segments) for episode in episodes)]
    every = max(1, len(episodes) // count)
    chosen = list(range(0, len(episodes), every))[:count]
    rows = [r for i in chosen for r in range(starts[i], starts[i + 1])]
    picked = batch.select(rows)
    trainer_lp, entropy = trainer.apply(old_token_stats, picked, temperature, top_k, top_p)
    values = {"advantage": picked.advantages, "trainer_logprob": trainer_lp, "entropy": entropy}
    at = 0
    for i in chosen:
        segments = episodes[i].segments
        episodes[i].meta["token_stats"] = {
            key: [v[at + j, :len(seg.token_ids)].tolist() for j, seg in enumerate(segments)]
            for key, v in values.items()}
        at += len(segments)
