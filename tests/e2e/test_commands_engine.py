"""Every command that samples takes its engine from the one factory: ``posttrain eval`` and
``filter`` build the member ``engine.name`` selects (a user's own, here, which logs its calls),
with ``engine.device``; ``serve`` and ``tau eval`` honour ``--engine`` and ``--device``."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app

runner = CliRunner()

ENGINE = "engine.name=examples/extensions/families.py:LoggedTorch"


def test_eval_samples_with_the_engine_the_config_names(tiny_dir, tmp_path):
    log = tmp_path / "calls.log"
    common = ["eval", str(tiny_dir), "eval.num_problems=6", f"out_dir={tmp_path / 'o'}"]
    plain = runner.invoke(app, common)
    logged = runner.invoke(app, [*common, ENGINE, f"engine.log={log}", "engine.device=cpu"])
    assert plain.exit_code == 0 and logged.exit_code == 0, logged.output
    assert json.loads(logged.stdout) == json.loads(plain.stdout)  # the same torch engine
    assert sum(int(n) for n in log.read_text().split()) == 6  # one sample each


def test_filter_samples_with_the_engine_the_config_names(tiny_dir, tmp_path):
    log = tmp_path / "calls.log"
    result = runner.invoke(app, ["filter", "configs/quickstart.yaml", "--model", str(tiny_dir),
                                 "--k", "2", "--num-prompts", "3",
                                 "--out", str(tmp_path / "kept.jsonl"),
                                 ENGINE, f"engine.log={log}", f"out_dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "run").exists()  # sampling makes no run directory
    assert sum(int(n) for n in log.read_text().split()) == 6  # 3 prompts x 2


def test_eval_places_the_engine_on_engine_device(tiny_dir):
    result = runner.invoke(app, ["eval", str(tiny_dir), "engine.device=cuda:99"])
    assert result.exit_code == 2 and "engine.device: cuda:99" in result.output, result.output


TAU_EVAL = ["tau", "eval", "--domain", "mock", "--solo", "--model"]


@pytest.mark.parametrize("command", [["serve"], TAU_EVAL])
def test_serving_commands_honour_engine_and_device(command, tiny_dir):
    def run(*options):
        return runner.invoke(app, [*command, str(tiny_dir), *options])

    device = run("--device", "cuda:99")
    assert device.exit_code == 2 and "cuda:99" in device.output, device.output
    unknown = run("--engine", "serch")
    assert unknown.exit_code == 2 and "unknown engine 'serch'" in unknown.output
    no_device = run("--engine", "vllm", "--device", "cpu")
    assert no_device.exit_code == 2 and "--device: applies to name in (torch), " \
        "not vllm" in no_device.output, no_device.output
