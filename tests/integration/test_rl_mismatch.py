"""The RL loop stops when the engine does not sample from the trainer's policy."""

import copy

import pytest
import torch

from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import Reporter, run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.rewards import RewardFunction
from posttrain.settings import ActorConfig, AlgoConfig, EvalConfig, OptimConfig, RLConfig
from posttrain.train import Trainer
from posttrain.types.errors import MismatchError

TASKS = ArithmeticTasks(("+",), 1)


def one_step(model, tok, tmp, engine_noise: float, **rl):
    engine_model = copy.deepcopy(model)
    with torch.no_grad():
        for p in engine_model.parameters():
            p.add_(engine_noise * torch.randn_like(p))
    engine = TorchEngine(engine_model, tok.pad_token_id, tok.eos_token_id)
    cfg = RLConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0,
                   optim=OptimConfig(lr=1e-3), **rl)
    steps_done = []
    reward = RewardFunction({"correct": ("numeric", 1.0)})
    run_rl(RLRun(Trainer(model, cfg.optim, 1), tok, TASKS, [], reward, EvalConfig(), "correct",
                 Reporter(tmp, quiet=True), on_step_end=steps_done.append, cfg=cfg,
                 algo=AlgoConfig(), actor=ActorConfig()), engine)
    return steps_done


@pytest.mark.parametrize("epochs", [1, 2])
def test_off_policy_engine_stops_the_run_before_the_step_ends(model, tokenizer, tmp_path, epochs):
    assert one_step(copy.deepcopy(model), tokenizer, tmp_path, 0.0, epochs=epochs) == [1]
    with pytest.raises(MismatchError, match="mismatch_tolerance"):
        one_step(model, tokenizer, tmp_path, 0.5, epochs=epochs)


def test_truncated_sampling_skips_the_check(model, tokenizer, tmp_path):
    assert one_step(model, tokenizer, tmp_path, 0.5, top_k=5) == [1]
