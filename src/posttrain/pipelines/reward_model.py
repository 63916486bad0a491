"""Bradley-Terry reward-model training (ALGORITHMS.md §9) on chosen/rejected pairs: a backbone
with a scalar head (``load_value_model``) scores each response on its last token, in the shared
pair loop (``pipelines.pairs``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import Field

from posttrain.models import sequence_scores
from posttrain.pipelines.pairs import evaluate_pairs, run_pairs
from posttrain.pipelines.preference_data import PreferencePair
from posttrain.pipelines.report import Reporter
from posttrain.train import OptimConfig, Section, Trainer
from posttrain.train.losses import bradley_terry_loss


class RewardModelConfig(Section):
    """``steps`` of ``batch_size`` pairs; held-out accuracy every ``eval_every`` steps."""

    steps: int = Field(200, ge=0)
    batch_size: int = Field(32, ge=1)
    eval_every: int = Field(50, ge=0)
    log_every: int = Field(10, ge=1)
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=10)


def reward_model_eval(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair]
                      ) -> dict[str, float]:
    """Bradley-Terry loss, accuracy (chosen scored higher) and mean margin on ``pairs``."""
    was_training = trainer.model.training
    trainer.model.eval()
    try:
        return evaluate_pairs(tokenizer, pairs, lambda batch, n: bradley_terry_loss(
            sequence_scores(trainer.model, batch.input_ids, batch.attention_mask), n))
    finally:
        trainer.model.train(was_training)


def run_reward_model(
    trainer: Trainer,
    tokenizer,
    pairs: Sequence[PreferencePair],
    cfg: RewardModelConfig,
    reporter: Reporter,
    eval_pairs: Sequence[PreferencePair] = (),
    seed: int = 0,
    start_step: int = 0,
    on_step_end: Callable[[int], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``trainer``'s scalar-head model for steps ``start_step .. cfg.steps``; returns the
    held-out evaluations."""
    evaluate = (lambda: reward_model_eval(trainer, tokenizer, eval_pairs)) if eval_pairs \
        else None
    return run_pairs(tokenizer, pairs, cfg, reporter, "reward_model", "reward model (BT)",
                     lambda batch, idx: trainer.reward_model_step(batch), evaluate, seed,
                     start_step, on_step_end)
