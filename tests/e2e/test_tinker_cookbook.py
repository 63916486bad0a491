"""Two of tinker-cookbook's recipes, unchanged, against ``posttrain tinker-serve`` on a tiny
model: the supervised ``chat_sl`` recipe on the cookbook's own example conversations, and the
``math_rl`` recipe on its arithmetic environment. They run in the environment
``.ci/cookbook_env.sh`` builds (``.venv-cookbook``, or ``POSTTRAIN_COOKBOOK_VENV``): the
cookbook pins an older transformers than this project's."""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.e2e.test_tinker_cli import start_tinker_serve

from posttrain.models import build_tiny

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("POSTTRAIN_COOKBOOK_VENV", ROOT / ".venv-cookbook"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(base_url, model path)`` of a tinker-serve of a nano Qwen3 named by its path."""
    model = str(build_tiny(tmp_path_factory.mktemp("cookbook") / "tiny", "nano",
                           architecture="qwen3"))
    server, url, health = start_tinker_serve(model, "--name", model)
    assert health == 200
    yield url, model
    server.send_signal(signal.SIGINT)
    server.wait(30)


def recipe(module: str, *options: str) -> list[dict]:
    """Run a cookbook recipe; its metrics.jsonl rows."""
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no tinker-cookbook environment at {VENV}: build it with "
                    ".ci/cookbook_env.sh")
    log = Path(dict(o.split("=", 1) for o in options)["log_path"])
    env = {**os.environ, "TINKER_TELEMETRY": "0", "TINKER_API_KEY": "tml-local"}
    run = subprocess.run([str(python), "-m", module, *options,
                          "behavior_if_log_dir_exists=delete"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "Training completed successfully" in run.stderr + run.stdout
    return [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]


def test_the_supervised_chat_recipe_trains_on_its_example_conversations(served, tmp_path):
    url, model = served
    data = subprocess.run([str(VENV / "bin" / "python"), "-c",
                           "import tinker_cookbook, pathlib; print(pathlib.Path("
                           "tinker_cookbook.__file__).parent / 'example_data' / "
                           "'conversations.jsonl')"], capture_output=True, text=True).stdout
    rows = recipe("tinker_cookbook.recipes.chat_sl.train", f"dataset={data.strip()}",
                  f"model_name={model}", "renderer_name=role_colon", f"base_url={url}",
                  "batch_size=16", "max_steps=8", "max_length=2048", "lora_rank=8",
                  "learning_rate=1e-3", "save_every=0", "eval_every=0",
                  "infrequent_eval_every=0", f"log_path={tmp_path / 'sl'}")
    assert [r["step"] for r in rows] == list(range(8))
    nll = [r["train_mean_nll"] for r in rows]
    # measured: 6.230 6.180 6.158 6.129 6.131 6.095 6.108 6.101 (other batches each step)
    assert sum(nll[-3:]) / 3 < sum(nll[:3]) / 3


def test_the_rl_recipe_runs_its_arithmetic_environment(served, tmp_path):
    url, model = served
    rows = recipe("tinker_cookbook.recipes.math_rl.train", "env=arithmetic",
                  f"model_name={model}", "renderer_name=role_colon", f"base_url={url}",
                  "group_size=4", "groups_per_batch=4", "max_steps=3", "max_tokens=5",
                  "lora_rank=4", "save_every=0", "eval_every=0", f"log_path={tmp_path / 'rl'}")
    assert len(rows) == 3
    assert all("env/all/reward/total" in r for r in rows), sorted(rows[0])
