"""The same config on other layouts: two data-parallel trainer processes, and rollouts on Ray
engine actors, end where the one-process run ends."""

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from posttrain.cli.app import app

pytestmark = pytest.mark.slow

runner = CliRunner()

SMALL = ["model.preset=nano", "sft.steps=6", "sft.batch_size=16", "sft.num_examples=200",
         "rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=4", "rl.eval_every=0",
         "eval.num_problems=4", "trainer.micro_batch_size=4", "threads=1"]


def run(tmp_path, name, *overrides):
    out = tmp_path / name
    result = runner.invoke(app, ["train", "configs/quickstart.yaml", f"out_dir={out}", *SMALL,
                                 *overrides])
    assert result.exit_code == 0, result.output
    return load_file(out / "rl_model" / "model.safetensors")


def assert_same_weights(a, b, exact=False):
    """``exact``: the same float32 arithmetic in both runs. Otherwise (one process against
    two) the runs sum each step's 4 micro-batch gradients in other orders (rank-local sums,
    then gloo): float32 rounding, ~eps32 of the terms, that Adam's m / (sqrt(v) + eps) turns
    into update noise up to lr / eps_adam times larger on near-zero gradients. The CLI has no
    float64 model to avoid it, but these runs' learning rates are small (SFT <= 6e-4 in warmup,
    RL <= 1e-6): measured <= 7.5e-8 (1 ulp of the weights) with AVX-512, AVX2 and scalar
    kernels; the tolerance keeps > 100x."""
    assert a.keys() == b.keys()
    for key in a:
        if exact:
            torch.testing.assert_close(b[key], a[key], atol=0, rtol=0, msg=key)
        else:
            torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=1e-4, msg=key)


TWO_FSDP2 = ["dist.trainer_processes=2", "trainer.shard=true"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process run both two-process layouts are held against, trained once."""
    return run(tmp_path_factory.mktemp("one"), "one")


@pytest.fixture(scope="module")
def two_fsdp2(tmp_path_factory):
    """Two FSDP2 trainer processes, uninterrupted and never checkpointed: the run that the
    layout test, the resumed runs and the torchrun launch must each end at, trained once."""
    out = tmp_path_factory.mktemp("two-fsdp2")
    return out / "two", run(out, "two", *TWO_FSDP2)


@pytest.fixture
def two_processes(request, tmp_path, two_fsdp2):
    """A two-process run directory and its weights: replicated trained here, FSDP2 shared."""
    if request.param == "fsdp2":
        return two_fsdp2
    return tmp_path / "two", run(tmp_path, "two", "dist.trainer_processes=2")


@pytest.mark.parametrize("two_processes", ["replicated", "fsdp2"], indirect=True)
def test_two_trainer_processes_end_at_the_one_process_weights(one_process, two_processes):
    out, weights = two_processes
    assert_same_weights(one_process, weights)
    assert not (out / "ranks" / "1" / "rl_model").exists()  # rank 0 writes


def test_two_lora_trainer_processes_end_at_the_one_process_lora_weights(tmp_path):
    """Replicated LoRA adapters: each process draws fresh adapters from its own random state,
    so every rank takes rank 0's (without that the first sync's checksum check fails on rank
    1); gradients are summed as for full weights."""
    lora = ["trainer.lora.r=8"]
    assert_same_weights(run(tmp_path, "one", *lora),
                        run(tmp_path, "two", *lora, "dist.trainer_processes=2"))


@pytest.mark.parametrize("fmt", ["whole", "sharded"])
def test_sharded_trainers_checkpoint_and_resume_exactly(tmp_path, two_fsdp2, fmt):
    """Whole or sharded checkpoints of two FSDP2 processes resume bit for bit on two, at the
    weights of the run that never stopped nor checkpointed; a sharded one resumes on one
    process too, at those weights up to the rounding of other summation orders
    (``assert_same_weights``)."""
    import shutil

    _, straight = two_fsdp2
    sharded = [*TWO_FSDP2, "checkpoint_every=1", f"checkpoint_format={fmt}"]
    run(tmp_path, "cut", *sharded, "rl.steps=1")  # stops after RL step 1's checkpoint
    if fmt == "sharded":
        shutil.copytree(tmp_path / "cut", tmp_path / "cut-alone")
        alone = run(tmp_path, "cut-alone", f"checkpoint_format={fmt}", "--resume")
        assert_same_weights(straight, alone)
    resumed = run(tmp_path, "cut", *sharded, "--resume")
    # the same layout, weights and optimiser state restored bit for bit: the same arithmetic
    assert_same_weights(straight, resumed, exact=True)


@pytest.mark.ray
def test_async_on_ray_engines_and_trainer_ends_at_the_local_async_weights(tmp_path):
    pytest.importorskip("ray")
    mode = ["rl.mode=async", "rl.async.max_staleness=0"]
    local = run(tmp_path, "local", *mode)
    # the trainer actor runs the same code with the same thread count (threads=1) on the same
    # episodes in the same order (the engines' log-probs only feed the mismatch metrics); its
    # whole checkpoints are gathered from the actor on the driver
    assert_same_weights(local, run(tmp_path, "ray", *mode, "dist.backend=ray",
                                   "dist.engines=2", "dist.trainer_actor=true",
                                   "checkpoint_every=1"), exact=True)
    assert (tmp_path / "ray" / "checkpoints" / "rl-000002").is_dir()


@pytest.mark.ray
def test_two_sharded_trainers_beside_ray_engines_end_at_the_one_process_async_weights(tmp_path):
    """The production shape: two FSDP2 trainer processes; rank 0 drives two engine actors,
    sends them the gathered weights over gloo and broadcasts the rollouts to rank 1 (each
    prompt generated once). It ends where one process with in-process rollouts ends, up to
    the rounding of two processes' summation orders (``assert_same_weights``)."""
    pytest.importorskip("ray")
    mode = ["rl.mode=async", "rl.async.max_staleness=0"]
    local = run(tmp_path, "local", *mode)
    assert_same_weights(local, run(tmp_path, "ray", *mode, *TWO_FSDP2, "dist.backend=ray",
                                   "dist.engines=2", "dist.weight_transport=collective"))


def test_torchrun_launched_trainers_end_where_the_local_launcher_does(tmp_path, two_fsdp2):
    """``torchrun --nproc-per-node 2 posttrain train ...``: the processes join its env://
    group (gloo on CPU), rank 0 claims and writes the run directory, and the run ends at the
    weights of the same two processes started by ``dist.trainer_processes=2`` (the same
    arithmetic in the same layout: bit for bit)."""
    import shutil
    import subprocess
    import sys

    _, local = two_fsdp2
    out = tmp_path / "torchrun"
    script = shutil.which("posttrain")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", script, "train", "configs/quickstart.yaml",
                    f"out_dir={out}", *SMALL, "trainer.shard=true"],
                   check=True, capture_output=True, timeout=600)
    assert_same_weights(local, load_file(out / "rl_model" / "model.safetensors"), exact=True)
    assert not (out / "ranks" / "1" / "rl_model").exists()


@pytest.mark.parametrize("where", [[], ["dist.backend=ray"]], ids=["in-process", "ray-actor"])
def test_a_run_whose_engine_sleeps_during_updates_ends_at_the_same_weights(tmp_path, where):
    """``engine.sleep``: the engine (in this process, or a colocated Ray actor) frees its
    weights for every RL update and the sync after it writes them all back: the same
    arithmetic, so the same weights bit for bit."""
    if where:
        pytest.importorskip("ray")
    assert_same_weights(run(tmp_path, "awake"),
                        run(tmp_path, "asleep", "engine.sleep=true", *where), exact=True)
