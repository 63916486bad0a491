"""The data-parallel trainer: two gloo processes, replicated or sharded with FSDP2, end at the
single process's parameters."""

import pytest
import torch

from posttrain.cluster.processes import run_processes
from posttrain.models import load_model
from posttrain.settings import ActorConfig, OptimConfig, TrainerConfig
from posttrain.train import Trainer
from posttrain.types import Batch, Episode, Segment


def batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    episodes = []
    for i in range(10):  # 5 micro-batches of 2: rank 0 takes 3, rank 1 takes 2
        n = 3 + i % 4
        ids = torch.randint(5, 400, (4 + n,), generator=g).tolist()
        seg = Segment.from_prompt_completion(ids[:4], ids[4:], [-1.0] * n)
        episodes.append(Episode([seg], reward=float(i % 3), group_id=str(i // 5)))
    b = Batch.from_episodes(episodes, pad_token_id=0)
    return b.replace(advantages=(torch.randn(b.loss_mask.shape, generator=g) * b.loss_mask))


def train_steps(model_dir, shard=False) -> dict[str, torch.Tensor]:
    model = load_model(model_dir)
    trainer = Trainer(model, OptimConfig(lr=1e-2, warmup_steps=0), 3,
                      TrainerConfig(micro_batch_size=2, shard=shard))
    for _ in range(2):
        metrics = trainer.rl_step(batch(), ActorConfig())
    return {"metrics": metrics, **{k: v.clone() for k, v in trainer.named_weights()}}


@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "fsdp2"])
def test_two_gloo_processes_end_at_the_single_process_parameters(tiny_dir, shard):
    alone = train_steps(tiny_dir)
    parallel = run_processes(train_steps, 2, tiny_dir, shard, threads=1)
    for key, value in alone.items():
        if key == "metrics":
            for name in ("loss", "pg_loss", "grad_norm", "entropy"):
                assert abs(parallel[key][name] - value[name]) < 1e-5, name
        else:
            torch.testing.assert_close(parallel[key], value, atol=1e-5, rtol=1e-4, msg=key)
    assert max(float((alone[k] - v).detach().abs().max()) for k, v in
               load_model(tiny_dir).named_parameters()) > 1e-3  # the steps moved the model
