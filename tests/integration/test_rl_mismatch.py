"""The RL loop stops when the engine does not sample from the trainer's policy."""

import copy
import random

import pytest
import torch

from posttrain.config import ActorConfig, AlgoConfig, EvalConfig, OptimConfig, RLConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.train import Trainer
from posttrain.types import Batch, Episode, SamplingParams, Segment
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


@pytest.mark.parametrize("truncation", [{"top_k": 5}, {"top_p": 0.8}, {"top_k": 8, "top_p": 0.9}])
def test_truncated_sampling_keeps_the_check(model, tokenizer, tmp_path, truncation):
    assert one_step(copy.deepcopy(model), tokenizer, tmp_path, 0.0, **truncation) == [1]
    with pytest.raises(MismatchError, match="mismatch_tolerance"):
        one_step(model, tokenizer, tmp_path, 0.5, **truncation)


@pytest.mark.parametrize("truncation", [{"top_k": 5}, {"top_p": 0.8}])
def test_trainer_scores_what_the_engine_sampled_under_truncation(model, tokenizer, truncation):
    """The engine's behaviour log-probs (over its truncated support) and the trainer's (the
    same support, recomputed: keep_sampling_mask) agree token by token; the full-vocabulary
    log-probs differ, by log of the kept mass."""
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    prompts = [tokenizer.encode(t.question) for t in TASKS.sample(4, random.Random(0))]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.9, seed=3,
                                                   **truncation))
    segments = [Segment(o.prompt_ids + o.token_ids,
                        [0] * len(o.prompt_ids) + [1] * len(o.token_ids),
                        [0.0] * len(o.prompt_ids) + o.logprobs,
                        [-1] * len(o.prompt_ids) + [0] * len(o.token_ids)) for o in outs]
    batch = Batch.from_episodes([Episode([s]) for s in segments], tokenizer.pad_token_id)
    trainer = Trainer(model, OptimConfig(), 1)
    ours = trainer.compute_logprobs(batch, 0.9, **truncation)
    full = trainer.compute_logprobs(batch, 0.9)
    mask = batch.loss_mask > 0
    # the engine's decoder and the trainer's forward: two float32 computations in different
    # orders (docs/testing.md), 16 eps32 of the largest |log-prob| compared
    bound = 16 * torch.finfo(torch.float32).eps * float(ours[mask].abs().max())
    torch.testing.assert_close(ours[mask], batch.behaviour_logprobs[mask], atol=bound, rtol=0)
    assert bool((full[mask] < ours[mask] - bound).any())
