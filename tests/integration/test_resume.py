"""A run interrupted after a checkpoint and resumed ends with the same weights as one that ran
through, for the SFT loop, the RL loop (sync, and async at zero staleness; bf16 compute with a
bf16 engine; Qwen2, Qwen3, Qwen3-MoE and Gemma 3 models), PPO with a critic (policy and critic
weights) and RL on a streamed dataset (the resumed process reads the stream afresh, from the
step's position)."""

import json

import pytest
import torch

from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    EvalConfig,
    OptimConfig,
    RLConfig,
    SFTConfig,
    TrainerConfig,
)
from posttrain.config.sections.data import DatasetConfig
from posttrain.config.sections.rl import SYNC_TOLERANCE, SyncConfig
from posttrain.data import generate_arithmetic_sft
from posttrain.data.prompt_stream import StreamedDatasetTasks
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.models import build_tiny, load_model, load_tokenizer, load_value_model
from posttrain.models.presets import ARCHITECTURES
from posttrain.recipes import run_rl, run_sft
from posttrain.recipes.rl import run_async_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.train import Trainer, latest_checkpoint, load_checkpoint_state, save_checkpoint
from posttrain.train.checkpoint import CRITIC_DIR

TASKS = ArithmeticTasks(("+",), 1)
REWARD_PARTS = {"correct": ("numeric", 1.0), "varied": ("length_mod3", 1.0)}
RL = RLConfig(steps=4, prompts_per_step=2, group_size=3, max_new_tokens=6, eval_every=0,
              optim=OptimConfig(lr=1e-2, warmup_steps=1))
ASYNC = RLConfig.model_validate({**RL.model_dump(), "mode": "async",
                                 "async": {"max_staleness": 0}})
RL_BF16 = RL.model_copy(update={"sync": SyncConfig(tolerance=SYNC_TOLERANCE["bf16"])})
SFT = SFTConfig(steps=4, batch_size=4, num_examples=10, optim=OptimConfig(lr=1e-2, warmup_steps=1))


class Interrupt(Exception):
    pass


def streamed_tasks(tmp):
    """5 prompts streamed (4 steps of 2 go round the data more than once)."""
    path = tmp.parent / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": 2 * i}) + "\n"
                            for i in range(5)))
    return StreamedDatasetTasks(DatasetConfig(path=str(path), streaming=True,
                                              eval_path=str(path), shuffle_buffer=3))


def run(stage, model_dir, tmp, stop_at=None, resume=False):
    tok = load_tokenizer(model_dir)
    ckpt = latest_checkpoint(tmp / "ckpt") if resume else None
    model = load_model(ckpt or model_dir)
    cfg = {"sft": SFT, "async": ASYNC, "bf16": RL_BF16}.get(stage, RL)
    precision = "bf16" if stage == "bf16" else "fp32"
    trainer = Trainer(model, cfg.optim, cfg.steps,
                      TrainerConfig(micro_batch_size=2, precision=precision))
    critic = None
    if stage == "ppo":
        torch.manual_seed(0)  # the fresh value head
        critic = Trainer(load_value_model(ckpt / CRITIC_DIR if ckpt else model_dir),
                         CriticConfig().optim, cfg.steps, TrainerConfig(micro_batch_size=2))
    start = load_checkpoint_state(ckpt, trainer, critic)["step"] if ckpt else 0

    def on_step_end(step):
        save_checkpoint(tmp / "ckpt", trainer, tok, {"step": step}, f"{stage}-{step}", critic)
        if step == stop_at:
            raise Interrupt

    rep = Reporter(tmp, quiet=True)
    if stage == "sft":
        data = generate_arithmetic_sft(TASKS, SFT.num_examples, 0.5, seed=0)
        run_sft(trainer, tok, data, SFT, rep, 0, start, on_step_end)
    else:
        algo = AlgoConfig(adv_estimator="gae") if critic else AlgoConfig()
        engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id, version=start,
                             dtype=torch.bfloat16 if precision == "bf16" else None)
        loop = run_async_rl if stage == "async" else run_rl
        tasks = streamed_tasks(tmp) if stage == "stream" else TASKS
        loop(RLRun(trainer, tok, tasks, tasks.eval_set(2), RewardFunction(REWARD_PARTS),
                   EvalConfig(), "correct", rep, 0, start, on_step_end, cfg=cfg, algo=algo,
                   actor=ActorConfig(), critic=critic,
                   critic_cfg=CriticConfig(enabled=critic is not None)), engine)
        if critic is not None:
            return torch.cat([p.detach().flatten() for p in (*model.parameters(),
                                                              *critic.model.parameters())])
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("stage", ["sft", "rl", "async", "ppo", "stream", "bf16", "qwen2",
                                   "qwen3", "qwen3_moe", "gemma3"])
def test_resume_continues_exactly(stage, tiny_dir, tmp_path, monkeypatch):
    """The last four: RL (generation, steps, verified weight syncs, resume) on each real
    architecture the tiny presets come in."""
    # an untrained model never answers correctly; a length-based part gives nonzero advantages
    monkeypatch.setitem(VERIFIERS, "length_mod3", lambda text, ref: len(text) % 3)
    if stage in ARCHITECTURES:
        tiny_dir = build_tiny(tmp_path / stage, "nano", seed=0, architecture=stage)
    straight = run(stage, tiny_dir, tmp_path / "a")
    with pytest.raises(Interrupt):
        run(stage, tiny_dir, tmp_path / "b", stop_at=2)
    torch.manual_seed(12345)  # the resumed process starts with unrelated global RNG state
    resumed = run(stage, tiny_dir, tmp_path / "b", resume=True)
    assert torch.equal(straight, resumed)
    start = torch.cat([p.detach().flatten() for p in load_model(tiny_dir).parameters()])
    assert not torch.equal(straight, start)
