"""Reward-model training (docs/reward_models.md) on chosen/rejected pairs, in the shared pair loop
(``recipes.pair_loop``): a backbone with a scalar head (``load_value_model``) on the last token.
``bradley_terry`` scores each response alone; ``pairwise_classifier`` scores one rendering of
the question and both answers (``comparison_messages``), trained on both orders; a feature may
train a reward model of its own (hook ``reward_model``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from posttrain.config import RewardModelConfig
from posttrain.data.preference_pairs import PreferencePair, comparison_batch, pair_batch
from posttrain.hooks import hooked
from posttrain.models import (
    frozen,
    load_tokenizer,
    load_value_model,
    save_model,
    sequence_scores,
)
from posttrain.recipes.build import RunParts
from posttrain.recipes.pair_loop import evaluate_pairs, run_pairs
from posttrain.recipes.placement import scalar_head_settings
from posttrain.reporting import Reporter, plot_stages
from posttrain.train import Trainer, reward_model_step
from posttrain.train.losses import REWARD_MODEL_LOSSES as LOSSES

BATCHES = {"bradley_terry": pair_batch, "pairwise_classifier": comparison_batch}


def reward_model_eval(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                      loss: str = "bradley_terry") -> dict[str, float]:
    """Loss, accuracy (chosen preferred) and mean margin on ``pairs``."""
    with frozen(trainer.model) as model:
        return evaluate_pairs(tokenizer, pairs, lambda batch, n: LOSSES[loss](
            sequence_scores(model, batch.input_ids, batch.attention_mask), n), BATCHES[loss])


def run_reward_model(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                     cfg: RewardModelConfig, reporter: Reporter,
                     eval_pairs: Sequence[PreferencePair] = (), seed: int = 0, start_step: int = 0,
                     on_step_end: Callable[[int], None] | None = None) -> list[dict[str, float]]:
    """Train ``trainer``'s scalar-head model for steps ``start_step .. cfg.steps``; returns the
    held-out evaluations."""
    evaluate = (lambda: reward_model_eval(trainer, tokenizer, eval_pairs, cfg.loss)) \
        if eval_pairs else None
    return run_pairs(tokenizer, pairs, cfg, reporter, "reward_model", f"reward model ({cfg.loss})",
                     lambda batch, idx: trainer.apply(reward_model_step, batch, cfg.loss),
                     evaluate, seed, start_step, on_step_end, BATCHES[cfg.loss])


def train_reward_model(parts: RunParts, backbone: Path, out: Path) -> list[dict[str, float]]:
    """A reward model on ``rm``'s pairs from ``backbone`` (a scalar head on its decoder, or
    what a feature trains itself for ``rm``: its ``reward_model`` hook), written to ``out``;
    returns the held-out evaluations."""
    cfg = parts.cfg
    for trains in hooked("reward_model"):
        if (train := trains(cfg.rm)) is not None:
            return train(parts, backbone, out)
    tokenizer = load_tokenizer(backbone)
    trainer = Trainer(load_value_model(backbone), cfg.rm.optim, cfg.rm.steps,
                      scalar_head_settings(cfg))
    pairs, held_out = parts.preference_pairs(cfg.rm)
    evals = run_reward_model(trainer, tokenizer, pairs, cfg.rm, parts.reporter, held_out, cfg.seed)
    save_model(trainer.export_model(), tokenizer, out)
    plot_stages(parts.reporter.path, parts.out)
    return evals
