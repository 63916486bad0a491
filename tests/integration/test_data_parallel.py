"""The data-parallel trainer: two gloo processes, replicated or sharded with FSDP2, end at the
single process's parameters; sharded over N processes each keeps 1/N of the memory."""

import gc
import warnings

import pytest
import torch

from posttrain.cluster.processes import run_processes
from posttrain.config import ActorConfig, OptimConfig, TrainerConfig
from posttrain.models import load_model
from posttrain.train import PolicySteps, Trainer, policy_steps
from posttrain.types import Batch, Episode, Segment

pytestmark = pytest.mark.slow


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


def train_steps(model_dir, shard=False, offload=False) -> dict[str, torch.Tensor]:
    # float64: the two layouts sum the micro-batch gradients in different orders, and Adam's
    # m / (sqrt(v) + eps) turns that rounding noise into update noise up to lr / eps = 1e6 times
    # larger on near-zero gradients; in float32 that is ~1e-4 and depends on the processor
    model = load_model(model_dir).to(torch.float64)
    trainer = Trainer(model, OptimConfig(lr=1e-2, warmup_steps=0), 3,
                      TrainerConfig(micro_batch_size=2, shard=shard, offload=offload))
    for _ in range(2):
        metrics = policy_steps(trainer, batch(), PolicySteps(ActorConfig()))
    return {"metrics": metrics, **{k: v.clone() for k, v in trainer.named_weights()}}


LAYOUTS = {"replicated": (False, False), "fsdp2": (True, False), "fsdp2-offload": (True, True)}




@pytest.mark.parametrize("layout", [*LAYOUTS, "fsdp2-4"])
def test_gloo_processes_end_at_the_single_process_parameters(tiny_dir, alone, launches, layout):
    """(``offload`` keeps FSDP2's shards and optimiser state in CPU memory and steps there: on
    a CPU machine the same arithmetic, so it must end where ``fsdp2`` does. Four processes
    share 5 micro-batches 2, 1, 1, 1: three run one at zero weight to stay in step, and
    nothing has to divide evenly: FSDP2 pads uneven shards.)"""
    parallel = launches[2][layout] if layout in LAYOUTS else launches[4]["fsdp2"]
    # Weights: each gradient entry sums 5 micro-batch terms (each < 1; the largest is 0.14), so
    # reordering the float64 sum moves it by at most 4 * 2.2e-16 * 5 = 4.4e-15; Adam turns that
    # into at most lr * 4.4e-15 / eps_adam = 1e-2 * 4.4e-15 / 1e-8 = 4.4e-9 per step, 8.8e-9
    # over the 2 steps -> atol 1e-8, no rtol.
    # Metrics: the log-probs are float32 (sequence_logprobs casts the logits), summed over 5
    # micro-batches; a float32 rounding flip moves a term by a few eps32 (1.2e-7) of its size.
    for key, value in alone.items():
        if key == "metrics":
            for name in ("loss", "pg_loss", "grad_norm", "entropy"):
                bound = 5 * 2 * 1.2e-7 * max(1.0, abs(value[name]))
                assert abs(parallel[key][name] - value[name]) <= bound, name
        else:
            torch.testing.assert_close(parallel[key], value, atol=1e-8, rtol=0, msg=key)
    assert max(float((alone[k] - v).detach().abs().max()) for k, v in
               load_model(tiny_dir).named_parameters()) > 1e-3  # the steps moved the model


def live_bytes() -> int:
    """Bytes of every tensor storage alive in this process (each storage counted once; a
    sharded tensor counts through its local shard)."""
    from torch.distributed.tensor import DTensor

    storages = {}
    with warnings.catch_warnings():  # isinstance on deprecated module objects warns
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for t in tensors:
        if not isinstance(t, DTensor) and t.device.type == "cpu":
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def local_bytes(model_dir) -> dict[str, int]:
    """This process's bytes after one (sharded) step: the local shards of the parameters and
    the optimiser state, and every tensor alive (what a whole copy kept aside would add to)."""
    trainer = Trainer(load_model(model_dir), OptimConfig(lr=1e-2, warmup_steps=0), 3,
                      TrainerConfig(micro_batch_size=2, shard=True))
    policy_steps(trainer, batch(), PolicySteps(ActorConfig()))
    gc.collect()

    def size(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    return {"params": sum(size(p) for p in trainer.model.parameters()),
            "optimizer": sum(size(v) for s in trainer.optimizer.state.values()
                             for v in s.values() if torch.is_tensor(v) and v.dim() > 0),
            "alive": live_bytes()}


def two_process_runs(model_dir) -> dict[str, dict]:
    """What the tests need of two processes, in one launch: the memory first (nothing else
    alive yet), then ``train_steps`` in every layout."""
    return {"bytes": local_bytes(model_dir),
            **{name: train_steps(model_dir, *layout) for name, layout in LAYOUTS.items()}}


def four_process_runs(model_dir) -> dict[str, dict]:
    """The same of four processes: the memory, then the FSDP2 steps."""
    return {"bytes": local_bytes(model_dir), "fsdp2": train_steps(model_dir, True)}


@pytest.fixture(scope="module")
def alone(tiny_dir):
    return train_steps(tiny_dir)


@pytest.fixture(scope="module")
def launches(tiny_dir) -> dict[int, dict]:
    """Rank 0's results of each launch, by process count (each launch costs seconds: a
    process imports torch and transformers)."""
    return {2: run_processes(two_process_runs, 2, tiny_dir, threads=1),
            4: run_processes(four_process_runs, 4, tiny_dir, threads=1)}


def test_sharding_keeps_a_1_over_n_share_in_each_process(tiny_dir, launches):
    """FSDP2 shards parameters and optimiser state and no process keeps a whole copy: with N
    processes each holds 1/N of the one-process bytes, give or take the padding of each shard
    to a multiple of N rows (at most N - 1 rows a tensor); all the tensors alive in a process
    stay within 1/N of the one-process total plus what is not sharded (the batch, buffers):
    a whole copy of the model kept aside would add the parameters' bytes again."""
    alone = local_bytes(tiny_dir)  # one process: no group, nothing sharded
    model = load_model(tiny_dir)
    row = sum(p[0].numel() * p.element_size() for p in model.parameters())  # a row a tensor
    for n in (2, 4):
        share = launches[n]["bytes"]
        for key, copies in (("params", 1), ("optimizer", 2)):
            slack = copies * (n - 1) * row / n
            assert abs(share[key] - alone[key] / n) <= slack, (n, key, share, alone)
        assert share["alive"] < alone["alive"] / n + alone["params"] / 2, (n, share, alone)
