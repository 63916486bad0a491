"""The loop every pair-based trainer shares (preference optimisation, reward models): step
``k`` takes pairs ``batch_indices(k, ...)`` of seeded per-epoch permutations (the step number
is the data cursor, as in SFT), logs every ``log_every`` steps, evaluates every ``eval_every``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from posttrain.config import PairDataConfig
from posttrain.data.conversations import batch_indices
from posttrain.data.preference_pairs import PreferencePair, pair_batch
from posttrain.recipes.sampling_loop import due
from posttrain.reporting import Reporter
from posttrain.types import Batch

CHUNK = 64  # pairs scored at once outside training
PairBatch = Callable[[object, list[PreferencePair]], Batch]


@torch.no_grad()
def evaluate_pairs(tokenizer, pairs: Sequence[PreferencePair],
                   pair_loss: Callable[[Batch, int], tuple[torch.Tensor, dict[str, torch.Tensor]]],
                   make_batch: PairBatch = pair_batch) -> dict[str, float]:
    """``loss`` and the statistics of ``pair_loss(batch, len(pairs))`` summed over ``CHUNK``-pair
    batches of ``pairs`` (each normalised by the total pair count, so the sums are means)."""
    totals = {"loss": 0.0}
    for i in range(0, len(pairs), CHUNK):
        loss, stats = pair_loss(make_batch(tokenizer, list(pairs[i : i + CHUNK])), len(pairs))
        for k, v in {"loss": loss, **stats}.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return totals


def run_pairs(tokenizer, pairs: Sequence[PreferencePair], cfg: PairDataConfig, reporter: Reporter,
              stage: str, title: str, step: Callable[[Batch, list[int]], dict[str, float]],
              evaluate: Callable[[], dict[str, float]] | None = None, seed: int = 0,
              start_step: int = 0, on_step_end: Callable[[int], None] | None = None,
              make_batch: PairBatch = pair_batch) -> list[dict[str, float]]:
    """Steps ``start_step .. cfg.steps`` of ``step(batch, pair_indices)`` on the pairs'
    ``make_batch`` rows, logged as ``stage`` under a progress bar titled ``title``. Returns the
    evaluations."""
    evals = []
    reporter.start(title, cfg.steps, start_step)
    for k in range(start_step, cfg.steps):
        idx = batch_indices(k, cfg.batch_size, len(pairs), seed)
        metrics = step(make_batch(tokenizer, [pairs[i] for i in idx]), idx)
        if evaluate is not None and due(cfg.eval_every, k, cfg.steps):
            result = evaluate()
            metrics |= {f"eval/{name}": v for name, v in result.items()}
            evals.append({"step": k + 1, **result})
        if due(cfg.log_every, k, cfg.steps) or "eval/loss" in metrics:
            reporter.log(stage, k + 1, metrics)
        reporter.advance(k + 1, f"loss {metrics['loss']:.3f} acc {metrics['reward_accuracy']:.2f}")
        if on_step_end is not None:
            on_step_end(k + 1)
    reporter.finish()
    return evals
