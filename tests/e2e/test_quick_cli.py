"""Quick instructions through the CLI: ``quick-data`` writes rows of the built-in tasks, SFT
on them (``model.quick_tokens``) teaches a nano model the answers, and ``eval --mode quick``
reports the same figures through the engine and through a served model; data asking tokens
the model lacks is refused before training."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.engines import TorchEngine
from posttrain.models import load_model, load_tokenizer
from posttrain.serve import Completer, Sessions, create_app, running

runner = CliRunner()
TRAIN = ["train", "examples/quick/sft.yaml", "model.preset=nano", "threads=1", "sft.steps=60",
         "sft.batch_size=16", "eval.num_problems=4"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("quick_rows")
    for name, extra in (("train", ["--rows", "300"]), ("eval", ["--rows", "60", "--split",
                                                                  "eval"])):
        result = runner.invoke(app, ["quick-data", str(d / f"{name}.jsonl"), *extra])
        assert result.exit_code == 0, result.output
    return d / "train.jsonl", d / "eval.jsonl"


def test_quick_data_replaces_a_file_of_rows_only_with_overwrite(tmp_path):
    """It wrote 10 rows over a 3,000-row file without a word; a 0-byte file holds no rows."""
    out = tmp_path / "rows.jsonl"
    out.write_text("")
    assert runner.invoke(app, ["quick-data", str(out), "--rows", "5"]).exit_code == 0
    before = out.read_text()
    refused = runner.invoke(app, ["quick-data", str(out), "--rows", "2"])
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    assert out.read_text() == before
    replaced = runner.invoke(app, ["quick-data", str(out), "--rows", "2", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert len(out.read_text().splitlines()) == 2


def quick_eval(*args):
    result = runner.invoke(app, ["eval", "--mode", "quick", *map(str, args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_sft_teaches_the_answers_and_serve_reports_the_engines_figures(rows, tmp_path):
    train, held = rows
    out = tmp_path / "run"
    result = runner.invoke(app, [*TRAIN, f"sft.data={train}", f"out_dir={out}"])
    assert result.exit_code == 0, result.output
    before = quick_eval(out / "base_model", "--data", held)
    after = quick_eval(out / "sft_model", "--data", held)
    assert max(before["accuracy"].values()) < 0.1 and after["accuracy"]["<action>"] >= 0.5
    figures = after["prefill_tokens"]
    assert figures["quick"] == 3 * 60
    assert figures["saved"] == figures["separate_requests"] - figures["quick"]
    model_dir = out / "sft_model"
    tok = load_tokenizer(model_dir)
    engine = TorchEngine(load_model(model_dir), tok.pad_token_id, tok.eos_token_id)
    with running(create_app(Completer(engine, tok, 512), Sessions(), "quick")) as url:
        served = quick_eval("--url", url, "--data", held)
    assert served.pop("through") == "serve" and after.pop("through") == "engine"
    assert served == after


def test_quick_answers_the_model_has_no_tokens_for_are_refused_before_training(rows, tmp_path):
    result = runner.invoke(app, [*TRAIN, f"sft.data={rows[0]}", f"out_dir={tmp_path / 'run'}",
                                 "model.quick_tokens=[]"])
    assert result.exit_code != 0
    assert "no quick-instruction token <action>, <query>, <domain>" in result.output
    assert not (tmp_path / "run" / "sft_model").exists()
    bad = runner.invoke(app, [*TRAIN, "model.quick_tokens=[action]"])
    assert bad.exit_code != 0 and "not 'action'" in bad.output
