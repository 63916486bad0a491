"""Three of tinker-cookbook's recipes, unchanged, against ``posttrain tinker-serve`` on a tiny
model: the supervised ``chat_sl`` recipe on the cookbook's own example conversations, the
``math_rl`` recipe on its arithmetic environment, and ``sdft`` (self-distillation on the
teacher's top-K log-probs) on a local ToolAlpaca-format dataset. They run in the environment
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
    assert "training completed successfully" in (run.stderr + run.stdout).lower()
    return [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]


def test_the_supervised_chat_recipe_trains_on_its_example_conversations(served, tmp_path):
    url, model = served
    data = subprocess.run([str(VENV / "bin" / "python"), "-c",
                           "import tinker_cookbook, pathlib; print(pathlib.Path("
                           "tinker_cookbook.__file__).parent / 'example_data' / "
                           "'conversations.jsonl')"], capture_output=True, text=True).stdout
    rows = recipe("tinker_cookbook.recipes.chat_sl.train", f"dataset={data.strip()}",
                  f"model_name={model}", "renderer_name=role_colon", f"base_url={url}",
                  "batch_size=16", "max_steps=8", "max_length=512", "lora_rank=8",
                  "learning_rate=1e-3", "save_every=0", "eval_every=0",
                  "infrequent_eval_every=0", f"log_path={tmp_path / 'sl'}")
    assert [r["step"] for r in rows] == list(range(8))
    nll = [r["train_mean_nll"] for r in rows]
    # measured: 6.229 6.179 6.158 6.126 6.129 6.087 6.101 6.093 (other batches each step)
    assert sum(nll[-3:]) / 3 < sum(nll[:3]) / 3


def test_the_rl_recipe_runs_its_arithmetic_environment(served, tmp_path):
    url, model = served
    rows = recipe("tinker_cookbook.recipes.math_rl.train", "env=arithmetic",
                  f"model_name={model}", "renderer_name=role_colon", f"base_url={url}",
                  "group_size=4", "groups_per_batch=4", "max_steps=3", "max_tokens=5",
                  "lora_rank=4", "save_every=0", "eval_every=0", f"log_path={tmp_path / 'rl'}")
    assert len(rows) == 3
    assert all("env/all/reward/total" in r for r in rows), sorted(rows[0])


def test_the_self_distillation_recipe_trains_on_the_teachers_top_k(served, tmp_path):
    """SDFT: the teacher (the base, shown the golden answer) scores each student sample's
    tokens with ``topk_prompt_logprobs``, and the student trains on those top-K
    distributions as ``[T, K]`` cross-entropy targets. Its data is ToolAlpaca's local
    Arrow format, written here (instructions and golden answers of arithmetic)."""
    url, model = served
    data = tmp_path / "toolalpaca"
    subprocess.run([str(VENV / "bin" / "python"), "-c", (
        "import datasets, sys; datasets.Dataset.from_dict({'prompt': "
        "[f'What is {a}+{a+1}?' for a in range(20)], 'golden_response': "
        "[str(2 * a + 1) for a in range(20)]}).save_to_disk(sys.argv[1])"), str(data)],
        check=True, capture_output=True)
    rows = recipe("tinker_cookbook.recipes.sdft.train", "dataset=toolalpaca",
                  f"toolalpaca_data_path={data}", f"model_name={model}",
                  "renderer_name=role_colon", f"base_url={url}", "groups_per_batch=4",
                  "max_tokens=6", "max_steps=2", "topk=5", "lora_rank=4", "save_every=0",
                  "eval_every=0", f"log_path={tmp_path / 'sdft'}")
    steps = [r for r in rows if "sdft/topk" in r]
    assert len(steps) == 2 and all(r["sdft/topk"] == 5 for r in steps), sorted(rows[0])
    assert all(r["sdft/mean_teacher_entropy"] > 0 for r in steps)
