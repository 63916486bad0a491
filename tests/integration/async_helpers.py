"""Shared pieces of the asynchronous-pipeline tests: a tiny RL config and a training run."""

import json

import pytest

from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import Reporter
from posttrain.recipes.sampling_loop import RLRun
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.settings import ActorConfig, AlgoConfig, EvalConfig, OptimConfig, RLConfig
from posttrain.train import Trainer

TASKS = ArithmeticTasks(("+",), 1)


@pytest.fixture(autouse=True)
def length_reward(monkeypatch):
    """The untrained model never answers right; a length-based reward gives groups spread."""
    monkeypatch.setitem(VERIFIERS, "length_mod3", lambda text, ref: float(len(text) % 3 == 0))


def rl_config(**async_options):
    mode = {"mode": "async", "async": async_options} if async_options else {}
    return RLConfig(steps=3, prompts_per_step=3, group_size=4, max_new_tokens=8, eval_every=0,
                    optim=OptimConfig(lr=3e-3), **mode)


def train(run, model, tokenizer, path, cfg, algo=None, engine=None, trainer=None):
    """``run`` (``run_rl`` or ``run_async_rl``) on ``TASKS``; returns the model and the
    metrics log. ``engine`` and ``trainer``: local ones of ``model`` by default."""
    if engine is None:
        engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    reward = RewardFunction({"correct": ("length_mod3", 1.0)})
    run(RLRun(trainer or Trainer(model, cfg.optim, cfg.steps), tokenizer, TASKS, [], reward,
              EvalConfig(), "correct", Reporter(path, quiet=True), seed=3, cfg=cfg,
              algo=algo or AlgoConfig(), actor=ActorConfig()), engine)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return model, [json.loads(line) for line in lines]
