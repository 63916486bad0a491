"""Bradley-Terry reward-model training: the step's loss is the formula on the model's own
scores, and the model learns to rank held-out arithmetic pairs."""

import math

import pytest
import torch

from posttrain.envs import ArithmeticTasks
from posttrain.models import load_value_model, sequence_scores
from posttrain.pipelines import Reporter
from posttrain.pipelines.preference_data import arithmetic_pairs, pair_batch
from posttrain.pipelines.reward_model import (
    RewardModelConfig,
    reward_model_eval,
    run_reward_model,
)
from posttrain.train import OptimConfig, Trainer, TrainerConfig

TASKS = ArithmeticTasks(("+",), 2, 0, 0.1)


def test_the_step_loss_is_bradley_terry_on_the_models_scores(tiny_dir, tokenizer):
    torch.manual_seed(0)
    model = load_value_model(tiny_dir)
    batch = pair_batch(tokenizer, arithmetic_pairs(TASKS, 3, seed=1))
    with torch.no_grad():
        scores = sequence_scores(model.eval(), batch.input_ids, batch.attention_mask).tolist()
    want = sum(-math.log(1 / (1 + math.exp(-(scores[2 * i] - scores[2 * i + 1]))))
               for i in range(3)) / 3
    trainer = Trainer(model, OptimConfig(lr=1e-3), 1, TrainerConfig(micro_batch_size=2))
    assert trainer.reward_model_step(batch)["loss"] == pytest.approx(want, rel=1e-4)


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
