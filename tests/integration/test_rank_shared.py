"""Rollouts shared by two trainer processes (``rollout.rank_shared``): rank 0's engine
generates a step once and rank 1 gets the same episodes; a weight sync runs on both ranks (the
checksum each rank computes of its own weights matches the engine's), and an error of rank 0's
engine is raised on rank 1 too, not left waiting."""

import torch.distributed as dist

from posttrain.cluster.processes import run_processes
from posttrain.config import DynamicSamplingConfig, OptimConfig, RLConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.models import load_model, load_tokenizer
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.rewards import RewardFunction
from posttrain.rollout.rank_shared import MirrorEngine, shared_source
from posttrain.rollout.single_turn import RolloutPlan, SyncEpisodes
from posttrain.train import Trainer


class Counted:
    """Rank 0's engine, counting its ``generate`` calls; ``fail`` makes them raise."""

    def __init__(self, engine, fail: bool) -> None:
        self.engine, self.fail, self.calls = engine, fail, 0

    def generate(self, prompts, sampling, seeds=None):
        self.calls += 1
        if self.fail:
            raise ValueError("rank 0's engine failed")
        return self.engine.generate(prompts, sampling, seeds)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def one_step(model_dir, fail: bool):
    """Each rank takes step 0 and syncs; returns what every rank saw (gathered)."""
    tokenizer = load_tokenizer(model_dir)
    rank = dist.get_rank()
    engine = MirrorEngine() if rank else Counted(TorchEngine(
        load_model(model_dir), tokenizer.pad_token_id, tokenizer.eos_token_id), fail)
    cfg = RLConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=6)
    plan = RolloutPlan(tokenizer, ArithmeticTasks(("+",), 1),
                       RewardFunction({"correct": ("numeric", 1.0)}), cfg,
                       cfg.params((tokenizer.eos_token_id,)), DynamicSamplingConfig(), (), 3)
    source = shared_source(SyncEpisodes(engine, plan))
    try:
        episodes, _, _ = source.take(0)
    except ValueError as exc:
        seen = ("raised", str(exc))
    else:
        trainer = Trainer(load_model(model_dir), OptimConfig(), 1)
        probes = [episodes[0].segments[0].token_ids]
        (report,) = source.call(lambda e: sync_weights(trainer, e, 1, probes))
        seen = ([s.token_ids for e in episodes for s in e.segments],
                [e.reward for e in episodes], report.checksum, report.mismatch)
    gathered = [None, None]
    dist.all_gather_object(gathered, (seen, getattr(engine, "calls", None)))
    return gathered


def test_rank_0_generates_once_and_rank_1_trains_on_the_same_episodes(tiny_dir):
    (seen0, calls0), (seen1, calls1) = run_processes(one_step, 2, tiny_dir, False, threads=1)
    assert calls0 == 1 and calls1 is None  # one generate call for the step, on rank 0
    assert seen0[0] == seen1[0] and len(seen0[0]) == 4 and seen0[1] == seen1[1]
    assert seen0[2] == seen1[2]  # the checksum of what each rank sent: the same weights
    assert seen0[3] == seen1[3] < 1e-5


def test_an_error_on_rank_0_is_raised_on_every_rank(tiny_dir):
    (seen0, _), (seen1, _) = run_processes(one_step, 2, tiny_dir, True, threads=1)
    assert seen0 == seen1 == ("raised", "rank 0's engine failed")
