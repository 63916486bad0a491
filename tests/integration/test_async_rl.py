"""The asynchronous pipeline: equal to the synchronous one at zero staleness, bounded
staleness otherwise, partial rollouts that record the weight switch."""

import copy
import random
import threading

import pytest
import torch
from async_helpers import (  # noqa: F401 (fixture)
    TASKS,
    Plan,
    PlannedEngine,
    RecordingTrainer,
    assert_stale_tokens_left_the_loss,
    length_reward,
    planned_steps,
    rl_config,
    train,
)

from posttrain.config import ActorConfig, AlgoConfig, EvalConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import run_rl
from posttrain.recipes.rl import run_async_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.rollout.async_loop import AsyncRollout
from posttrain.rollout.async_source import fresh_enough, step_groups
from posttrain.rollout.buffer import RolloutBuffer
from posttrain.rollout.dispatch import Dispatcher, SampleRequest, TaskMixer
from posttrain.rollout.worker import RolloutWorker
from posttrain.train import Trainer
from posttrain.train.rl_update import PolicySteps, PolicyUpdate
from posttrain.types import Episode, SamplingParams, Segment, read_episodes
from posttrain.types.errors import WeightSyncError


def test_async_at_zero_staleness_ends_at_the_sync_parameters(model, tokenizer, tmp_path):
    sync_model, sync_log = train(run_rl, copy.deepcopy(model), tokenizer, tmp_path / "s",
                                 rl_config())
    async_model, async_log = train(
        run_async_rl, copy.deepcopy(model), tokenizer, tmp_path / "a",
        rl_config(max_staleness=0, chunk_tokens=None, partial_rollout=False))
    assert [r["reward"] for r in async_log] == [r["reward"] for r in sync_log]
    assert all(r["staleness/max"] == 0 for r in async_log)
    # Exact: both schedules run the same PolicyUpdate in the main thread on the same episodes
    # in the same order (the staleness mask multiplies the loss mask by 1.0; behaviour log-probs
    # only feed the mismatch metric), so the float32 arithmetic is the same. A tolerance could
    # not absorb a rounding difference anyway: Adam's m / (sqrt(v) + eps) amplifies it by up to
    # lr / eps_adam on near-zero gradients (~1e-4 here, see test_data_parallel.py).
    moved = 0.0
    for (name, p), q, p0 in zip(sync_model.named_parameters(), async_model.parameters(),
                                model.parameters()):
        torch.testing.assert_close(q, p, atol=0, rtol=0, msg=name)
        moved = max(moved, float((p - p0).detach().abs().max()))
    assert moved > 1e-3  # the runs did train


@pytest.mark.parametrize("partial", [True, False])
def test_tokens_beyond_the_staleness_bound_leave_the_loss(model, tokenizer, tmp_path, partial):
    plan = Plan(partial)  # group 0's first three samples are trained two versions late
    cfg = rl_config(max_staleness=1, chunk_tokens=2, partial_rollout=partial, capacity=24)
    cfg = cfg.model_copy(update={"save_episodes": True})
    trainer = RecordingTrainer(model, cfg.optim, cfg.steps)
    _, log = train(run_async_rl, model, tokenizer, tmp_path, cfg, trainer=trainer,
                   engine=PlannedEngine(model, tokenizer, plan, hold=True))
    episodes = list(read_episodes(tmp_path / "episodes.jsonl"))
    # the plan held: each step took its groups, each token has its planned version (a
    # partial rollout's first chunk of 2 tokens at the first, the rest at the second)
    assert planned_steps(episodes) == Plan.STEPS
    for e in episodes:
        first, rest = plan.versions(*map(int, e.meta["sample_id"].split(":")))
        (seg,) = e.segments
        assert [v for v, m in zip(seg.versions, seg.loss_mask) if m] == \
            [first] * 2 + [rest] * 6, e.meta["sample_id"]
    # 12 samples of 8 tokens a step; at step 2 group 0's first three samples are two versions
    # old: their first chunks (2 tokens each) with a partial rollout, else all 8 tokens each
    # (6 / 96 = 1/16, 24 / 96 = 1/4)
    assert_stale_tokens_left_the_loss(log, trainer, 96, [0, 0, 3 * (2 if partial else 8)])
    for step, row in enumerate(log):
        # a partial rollout's samples that crossed an update: 6 of 12 at step 1, 9 at step 2
        assert row["staleness/mixed_versions"] == ([0, 0.5, 0.75][step] if partial else 0)
    assert all(r["kept_groups"] == 3 for r in log)


def test_a_partial_rollout_records_the_switch_and_each_tokens_behaviour_logprob(model,
                                                                                tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, eos_token_id=None)  # never stops early
    worker = RolloutWorker(engine, tokenizer, RewardFunction({"c": ("numeric", 1.0)}),
                           SamplingParams(max_new_tokens=8), chunk_tokens=3)
    for i, task in enumerate(TASKS.sample(2, random.Random(0))):
        worker.admit(SampleRequest(0, i, task, seed=11 + i))
    old = TorchEngine(model, tokenizer.pad_token_id)  # scores under the first weights
    assert worker.step() == []  # 3 tokens each, under version 0
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.1)
    engine.update_weights(model.named_parameters(), 1)  # the update lands mid-generation
    assert worker.step() == []
    finished = worker.step()
    assert len(finished) == 2
    for _, episode in finished:
        seg = episode.segments[0]
        n_prompt = len(seg.token_ids) - 8
        assert seg.versions[n_prompt:] == [0, 0, 0, 1, 1, 1, 1, 1]
        before, after = old.score([seg.token_ids])[0], engine.score([seg.token_ids])[0]
        want = before[n_prompt:n_prompt + 3] + after[n_prompt + 3:]
        # generation in chunks and one scoring pass: two float32 computations of the same
        # log-probs, within 16 eps32 of the largest (~8 chained reductions, ~2 eps32 each)
        eps32 = torch.finfo(torch.float32).eps
        torch.testing.assert_close(seg.logprobs[n_prompt:], want,
                                   atol=16 * eps32 * max(abs(x) for x in want), rtol=0)
        assert max(abs(a - b) for a, b in zip(before[n_prompt + 3:], after[n_prompt + 3:])) > 1e-3


def test_dynamic_sampling_replaces_groups_without_signal(model, tokenizer, tmp_path):
    algo = AlgoConfig(dynamic_sampling={"enabled": True, "max_rounds": 3})
    _, log = train(run_async_rl, model, tokenizer, tmp_path,
                   rl_config(max_staleness=0, chunk_tokens=4), algo)  # timing-free
    assert sum(r["discarded_groups"] for r in log) > 0
    assert all(r["kept_groups"] == 3 for r in log)


class StuckEngine:
    """Generates nothing until ``go`` is set; then fails."""

    version = 0

    def __init__(self):
        self.go = threading.Event()

    def generate(self, prompts, sampling, seeds=None):
        self.go.wait()
        raise RuntimeError("engine crashed")


def async_rollout(engine, tokenizer):
    sampling = SamplingParams(max_new_tokens=4)
    worker = RolloutWorker(engine, tokenizer, RewardFunction({"c": ("numeric", 1.0)}),
                           sampling, chunk_tokens=4)
    dispatcher = Dispatcher(step_groups(TASKS, 0, 2, 2), 2, 2, max_staleness=0)
    return AsyncRollout([worker], dispatcher, RolloutBuffer(2), capacity=4)


def test_a_sync_that_cannot_start_is_an_error_and_engine_errors_reach_the_trainer(tokenizer):
    engine = StuckEngine()
    with async_rollout(engine, tokenizer) as loop:
        stuck = "worker 0 did not reach a sync point within 0.2 s .4 samples in flight"
        with pytest.raises(WeightSyncError, match=stuck):
            loop.call(lambda engine: None, drain=True, timeout=0.2)
        engine.go.set()
        with pytest.raises(RuntimeError, match="a rollout thread failed") as info:
            loop.wait_groups(1)
        assert "engine crashed" in str(info.value.__cause__)


def test_stale_tokens_leave_the_loss(model, tokenizer):
    cfg = rl_config()
    update = PolicyUpdate(trainer=Trainer(model, cfg.optim, 1), algo=AlgoConfig(),
                          steps=PolicySteps.of(cfg, AlgoConfig(), ActorConfig()),
                          pad_token_id=tokenizer.pad_token_id, part_weights={"correct": 1.0})
    episodes = [Episode([Segment.from_prompt_completion([1, 5], [6, 7, 8, 9], version=v)],
                        reward=float(i % 2), group_id="0")
                for i, v in enumerate([[3, 3, 4, 5], [5, 5, 5, 5]])]
    metrics = update(episodes, version=5, max_staleness=1)
    assert metrics["staleness/masked"] == pytest.approx(2 / 8)
    assert metrics["staleness/max"] == 2 and metrics["staleness/mixed_versions"] == 0.5
    assert fresh_enough(episodes[1:], 5, 0) and not fresh_enough(episodes, 5, 1)


def test_a_task_mixer_feeds_the_async_loop_by_ratio(model, tokenizer, tmp_path):
    families = {"add": ArithmeticTasks(("+",), 1), "mul": ArithmeticTasks(("*",), 1)}
    mixer = TaskMixer(families, {"add": 1, "mul": 1}, seed=5)
    cfg = rl_config(max_staleness=1).model_copy(update={"save_episodes": True})
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_async_rl(RLRun(Trainer(model, cfg.optim, cfg.steps), tokenizer, None, [],
                       RewardFunction({"correct": ("length_mod3", 1.0)}), EvalConfig(),
                       "correct", Reporter(tmp_path, quiet=True), cfg=cfg, algo=AlgoConfig(),
                       actor=ActorConfig()),
                 engine, groups=mixer.groups(cfg.group_size))
    prompts = [tokenizer.decode(e.segments[0].token_ids[:-e.segments[0].num_trainable or None])
               for e in read_episodes(tmp_path / "episodes.jsonl")]
    groups = {int(e.meta["sample_id"].split(":")[0]): p for e, p in
              zip(read_episodes(tmp_path / "episodes.jsonl"), prompts)}
    assert len(groups) == cfg.steps * cfg.prompts_per_step
    for group, prompt in groups.items():
        assert ("*" if mixer(group)[0] == "mul" else "+") in prompt.split("What is")[-1]
    assert {mixer(g)[0] for g in groups} == {"add", "mul"}
