"""Sharded checkpoints (``checkpoint_format: sharded``): each process writes its own FSDP2
shards through torch.distributed.checkpoint, and the checkpoint resumes on another process
count (2 -> 1, 2 -> 2, 1 -> 2) where an uninterrupted run would be."""

import shutil
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cluster.processes import run_processes
from posttrain.config import ActorConfig, OptimConfig, TrainerConfig
from posttrain.models import build_tiny, load_model, load_tokenizer
from posttrain.train import (
    CheckpointMismatchError,
    PolicySteps,
    Trainer,
    latest_checkpoint,
    load_checkpoint_state,
    policy_steps,
    save_checkpoint,
    whole_model,
)

sys.path.insert(0, str(Path(__file__).parent))
from test_data_parallel import batch  # noqa: E402

pytestmark = pytest.mark.slow


def trainer(model_dir, shard: bool) -> Trainer:
    # float64, as in test_data_parallel: 1 and 2 processes sum gradients in other orders
    return Trainer(load_model(model_dir).to(torch.float64),
                   OptimConfig(lr=1e-2, warmup_steps=0), 3,
                   TrainerConfig(micro_batch_size=2, shard=shard))


def weights(t: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in t.named_weights()}


def step_save_step(model_dir, root, shard: bool) -> dict:
    """One step, a sharded checkpoint, one more step: the weights at both points."""
    t = trainer(model_dir, shard)
    policy_steps(t, batch(), PolicySteps(ActorConfig()))
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    save_checkpoint(root, t, load_tokenizer(model_dir), {"step": 1}, "rl-000001",
                    write=rank == 0, sharded=True)
    saved = weights(t)
    policy_steps(t, batch(), PolicySteps(ActorConfig()))
    return {"saved": saved, "after": weights(t), "step": t.step}


def resume_step(model_dir, root, shard: bool) -> dict:
    t = trainer(model_dir, shard)
    cursor = load_checkpoint_state(latest_checkpoint(root), t)
    policy_steps(t, batch(), PolicySteps(ActorConfig()))
    return {"after": weights(t), "cursor": cursor, "step": t.step}


def assert_close(a: dict, b: dict) -> None:
    # float64 weights through Adam, as test_data_parallel bounds them: 8.8e-9 over 2 steps
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-8, rtol=0, msg=key)


@pytest.fixture(scope="module")
def two_process_checkpoint(tmp_path_factory, tiny_dir):
    root = tmp_path_factory.mktemp("sharded") / "checkpoints"
    return root, run_processes(step_save_step, 2, tiny_dir, root, True, threads=1)


def test_each_process_writes_its_own_shards(two_process_checkpoint):
    root, _ = two_process_checkpoint
    ckpt = latest_checkpoint(root)
    files = sorted((ckpt / "shards").glob("*.distcp"))
    assert len(files) == 2
    sizes = [f.stat().st_size for f in files]
    # half each, give or take the padding of each shard to whole rows: nothing gathered whole
    assert max(sizes) < 1.2 * min(sizes), sizes
    assert not list(ckpt.glob("*.safetensors"))  # no whole model was written


@pytest.mark.parametrize("processes", [1, 2])
def test_a_two_process_checkpoint_resumes_on_any_process_count(
        two_process_checkpoint, tiny_dir, processes):
    root, straight = two_process_checkpoint
    if processes == 1:
        resumed = resume_step(tiny_dir, root, False)
    else:
        resumed = run_processes(resume_step, 2, tiny_dir, root, True, threads=1)
    assert resumed["cursor"] == {"step": 1} and resumed["step"] == straight["step"] == 2
    assert_close(straight["after"], resumed["after"])


def test_a_one_process_checkpoint_resumes_sharded_over_two(tmp_path, tiny_dir):
    straight = step_save_step(tiny_dir, tmp_path / "checkpoints", False)
    resumed = run_processes(resume_step, 2, tiny_dir, tmp_path / "checkpoints", True, threads=1)
    assert_close(straight["after"], resumed["after"])


def test_export_writes_the_saved_policy_as_a_model(two_process_checkpoint, tmp_path):
    root, straight = two_process_checkpoint
    out = tmp_path / "exported"
    result = CliRunner().invoke(app, ["export", str(latest_checkpoint(root)), str(out)])
    assert result.exit_code == 0, result.output
    exported = load_model(out)
    for name, value in exported.named_parameters():  # float64 master weights, fp32 export
        torch.testing.assert_close(value, straight["saved"][name].float(), atol=0, rtol=0)
    assert exported.get_output_embeddings().weight is exported.get_input_embeddings().weight


def test_a_checkpoint_of_another_model_is_refused_by_name(two_process_checkpoint, tmp_path):
    root, _ = two_process_checkpoint
    other = build_tiny(tmp_path / "micro", "micro", seed=0)
    with pytest.raises(CheckpointMismatchError, match="model.preset"):
        load_checkpoint_state(latest_checkpoint(root), trainer(other, False))
    relabelled = tmp_path / "relabelled"
    shutil.copytree(latest_checkpoint(root), relabelled)
    shutil.copy(other / "config.json", relabelled / "config.json")
    with pytest.raises(CheckpointMismatchError, match="model.preset"):
        whole_model(relabelled)
