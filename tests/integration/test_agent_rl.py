"""Multi-turn RL: GRPO over agent episodes trains the tokens the model sampled across turns."""

import itertools
import json

import pytest

from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    Compaction,
    EvalConfig,
    LoopLimits,
    OptimConfig,
    RLConfig,
)
from posttrain.config.sections.rl import BehaviourRegConfig
from posttrain.engines import TorchEngine
from posttrain.envs import CalculatorTasks, calculate
from posttrain.harness import ToolRegistry, episode_problems
from posttrain.models import encode_chat
from posttrain.recipes import run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.rollout.agent import AgentRollout
from posttrain.train import Trainer
from posttrain.types import Batch, read_episodes

TOOLS = ToolRegistry([calculate])
REWARD = RewardFunction({"correct": ("numeric", 1.0), "format": ("format", 0.1)})
# Engine and trainer log-probs are two float32 computations of the same values: within 16 eps32
# of their size (~8 chained float32 reductions, ~2 eps32 each). A mean |difference| is then
# within 16 eps32 of the mean |log p| of the tokens, ~ the entropy of the nearly untrained
# tiny model: <= log(512) = 6.2, 8 for a sample mean.
EPS32 = 2.0 ** -23  # float32 epsilon
MISMATCH = 16 * EPS32 * 8.0


def test_agent_rollout_groups_and_multi_turn_masks(model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    tasks = CalculatorTasks(digits=2).sample(2, __import__("random").Random(0))
    roll = AgentRollout(TOOLS, LoopLimits(max_turns=2, max_tokens=300))
    from posttrain.types import SamplingParams
    eps = roll(engine, tokenizer, tasks, REWARD, SamplingParams(max_new_tokens=12, seed=0),
               group_size=3, group_prefix="r-")
    assert [e.group_id for e in eps] == ["r-0"] * 3 + ["r-1"] * 3
    batch = Batch.from_episodes(eps, tokenizer.pad_token_id)
    assert batch.loss_mask.sum() == sum(e.segments[0].num_trainable for e in eps)


def test_rl_on_calculator_episodes_trains_with_engine_and_trainer_agreeing(model, tokenizer,
                                                                          tmp_path):
    cfg = RLConfig(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=24, eval_every=2,
                   optim=OptimConfig(lr=1e-3))
    roll = AgentRollout(TOOLS, LoopLimits(max_turns=2, max_tokens=300))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    tasks = CalculatorTasks(digits=2)
    run_rl(RLRun(Trainer(model, cfg.optim, 2), tokenizer, tasks, tasks.eval_set(3), REWARD,
                 EvalConfig(num_problems=3, max_new_tokens=24), "correct",
                 Reporter(tmp_path, quiet=True), cfg=cfg, algo=AlgoConfig(),
                 actor=ActorConfig()), engine, rollout_fn=roll)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"tool_use", "turns", "eval/tool_use", "loss", "grad_norm"} <= set(rows[-1])
    # the trainer re-scores every sampled token of every turn as the engine sampled it
    assert all(r["mismatch"] < MISMATCH for r in rows)
    # every step's weight sync was verified: same checksum, probes scored alike
    assert all(r["sync/mismatch"] < MISMATCH for r in rows)


@pytest.mark.parametrize("algo,rollout", [
    (AlgoConfig(adv_estimator="gigpo", behaviour_reg=BehaviourRegConfig(k_err=2.0)),
     AgentRollout(TOOLS, LoopLimits(max_turns=3, max_tokens=300),
                  Compaction("discard_all", ratio=0.3))),
    (AlgoConfig(adv_estimator="tree_grpo"),
     AgentRollout(TOOLS, LoopLimits(max_turns=3, max_tokens=300), tree=(1, 1))),
])
def test_step_and_tree_credit_train_on_agent_episodes(model, tokenizer, tmp_path, algo, rollout,
                                                      monkeypatch):
    calls = itertools.count(1)  # rewards 1, 0, 1, ... whatever the random model says
    monkeypatch.setitem(VERIFIERS, "alternating", lambda c, r: float(next(calls) % 2))
    alternating = RewardFunction({"correct": ("alternating", 1.0)})

    cfg = RLConfig(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=48, eval_every=0,
                   save_episodes=True, optim=OptimConfig(lr=1e-3))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    tasks = CalculatorTasks(digits=2)
    run_rl(RLRun(Trainer(model, cfg.optim, 2), tokenizer, tasks, [], alternating, EvalConfig(),
                 "correct", Reporter(tmp_path, quiet=True), cfg=cfg, algo=algo,
                 actor=ActorConfig()), engine, rollout_fn=rollout)
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert row["mismatch"] < MISMATCH and row["grad_norm"] > 0
    episodes = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert len(episodes) == 8 and all(episode_problems(e, tokenizer) == [] for e in episodes)


def test_sft_trace_renders_with_tools_and_trains_only_assistant_turns(tokenizer):
    import random
    tasks = CalculatorTasks(seed=0)
    trace = tasks.sft_conversation(tasks.sample(1, random.Random(0))[0], 0.0, random.Random(1))
    ids, mask = encode_chat(tokenizer, trace, TOOLS.schemas())
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nTools: calculate(expression)\n")
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert trained == trace[1]["content"] + "<|im_end|>" + trace[3]["content"] + "<|im_end|>"
