"""Reward-model training: each step's loss is its formula (Bradley-Terry, pairwise
classifier) on the model's own scores, and the model learns to rank held-out arithmetic
pairs."""

import math

import pytest
import torch

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.data.preference_pairs import arithmetic_pairs, comparison_batch, pair_batch
from posttrain.envs import ArithmeticTasks
from posttrain.models import load_value_model, sequence_scores
from posttrain.recipes.reward_model import (
    RewardModelConfig,
    reward_model_eval,
    run_reward_model,
)
from posttrain.reporting import Reporter
from posttrain.rollout.wrappers.judged import ClassifierCompare
from posttrain.train import Trainer, reward_model_step

TASKS = ArithmeticTasks(("+",), 2, 0, 0.1)
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7


def loss_tolerance(scores):
    """The trainer's float32 scores (another micro-batching, train mode) are within 16 eps32 of
    the largest score of the formula's (~8 chained float32 reductions, ~2 eps32 each); a loss
    term -log sigmoid(+-s) moves by at most |ds| (slope < 1), plus its own float32 rounding."""
    return 16 * EPS32 * (2 * max(abs(s) for s in scores) + 1)


def test_the_step_loss_is_bradley_terry_on_the_models_scores(tiny_dir, tokenizer):
    torch.manual_seed(0)
    model = load_value_model(tiny_dir)
    batch = pair_batch(tokenizer, arithmetic_pairs(TASKS, 3, seed=1))
    with torch.no_grad():
        scores = sequence_scores(model.eval(), batch.input_ids, batch.attention_mask).tolist()
    want = sum(-math.log(1 / (1 + math.exp(-(scores[2 * i] - scores[2 * i + 1]))))
               for i in range(3)) / 3
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2))
    assert reward_model_step(trainer, batch)["loss"] == pytest.approx(
        want, abs=loss_tolerance(scores))


def test_a_reward_model_learns_to_rank_held_out_pairs(tiny_dir, tokenizer, tmp_path):
    torch.manual_seed(0)
    cfg = RewardModelConfig(steps=40, batch_size=16, eval_every=40,
                            optim=OptimConfig(lr=1e-3, warmup_steps=5))
    trainer = Trainer(load_value_model(tiny_dir), cfg.optim, cfg.steps)
    held_out = arithmetic_pairs(TASKS, 64, seed=0, split="eval")
    before = reward_model_eval(trainer, tokenizer, held_out)
    (after,) = run_reward_model(trainer, tokenizer, arithmetic_pairs(TASKS, 600, seed=0), cfg,
                                Reporter(tmp_path, quiet=True), held_out)
    assert after["reward_accuracy"] > 0.9 > before["reward_accuracy"] + 0.2
    assert after["loss"] < before["loss"]


def test_the_pairwise_classifier_step_is_its_formula_on_both_orders(tiny_dir, tokenizer):
    torch.manual_seed(0)
    model = load_value_model(tiny_dir)
    batch = comparison_batch(tokenizer, arithmetic_pairs(TASKS, 3, seed=1))
    assert len(batch) == 6 and not torch.equal(batch.input_ids[0], batch.input_ids[1])
    with torch.no_grad():
        s = sequence_scores(model.eval(), batch.input_ids, batch.attention_mask).tolist()
    bce = lambda x, t: -math.log(1 / (1 + math.exp(-x))) if t else -math.log(  # noqa: E731
        1 - 1 / (1 + math.exp(-x)))
    want = sum(bce(s[2 * i], 1) + bce(s[2 * i + 1], 0) for i in range(3)) / 6
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2))
    got = reward_model_step(trainer, batch, "pairwise_classifier")
    assert got["loss"] == pytest.approx(want, abs=loss_tolerance(s))


@pytest.mark.slow
def test_a_pairwise_classifier_learns_and_compares_symmetrically(tiny_dir, tokenizer, tmp_path):
    torch.manual_seed(0)
    cfg = RewardModelConfig(loss="pairwise_classifier", steps=40, batch_size=16,
                            eval_every=40, optim=OptimConfig(lr=1e-3, warmup_steps=5))
    trainer = Trainer(load_value_model(tiny_dir), cfg.optim, cfg.steps)
    held_out = arithmetic_pairs(TASKS, 64, seed=0, split="eval")
    (after,) = run_reward_model(trainer, tokenizer, arithmetic_pairs(TASKS, 600, seed=0), cfg,
                                Reporter(tmp_path, quiet=True), held_out)
    assert after["reward_accuracy"] > 0.9
    compare = ClassifierCompare(trainer.model, tokenizer)
    pair = held_out[0]
    q = pair.prompt[-1]["content"]
    ab, ba = compare([(q, pair.chosen, pair.rejected), (q, pair.rejected, pair.chosen)])
    assert ab > 0.5 and ab + ba == pytest.approx(1.0)
