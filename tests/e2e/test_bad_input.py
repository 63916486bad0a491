"""Every command meets bad input with one line naming the problem and exit code 2: missing or
broken files, directories that are not models, data without a valid row, unknown names."""

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app

runner = CliRunner()


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "file.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text("garbage\n")
    (tmp_path / "rows.jsonl").write_text('{"text": "What is 1+1?", "answer": 2}\n' * 4)
    return tmp_path


CASES = {
    "eval: a directory without a model": (["eval", "{d}/empty"], "has no config.json"),
    "eval: a missing config": (["eval", "{d}/empty", "--config", "{d}/none.yaml"],
                               "does not exist"),
    "train: a missing config": (["train", "{d}/none.yaml"], "does not exist"),
    "train: a missing SFT file": (["train", "configs/quickstart.yaml", "stages=[sft]",
                                   "model.preset=nano", "sft.data={d}/none.jsonl", "--out",
                                   "{d}/o"], "SFT data '{d}/none.jsonl' does not exist"),
    "reward-model: pairs without a valid row": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano",
         "rm.data={d}/rows.jsonl", "out_dir={d}/o"],
        "holds no usable row (4 skipped; row 0: row needs 'chosen' and 'rejected')"),
    "reward-model: pairs that are not JSON lines": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano", "rm.data={d}/bad.jsonl",
         "out_dir={d}/o"], "JSON parse error: Invalid value. in row 0"),
    "reward-model: a missing pairs file": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano",
         "rm.data={d}/none.jsonl", "out_dir={d}/o"], "does not exist"),
    "train: a dataset without the prompt column": (
        ["train", "configs/quickstart.yaml", "stages=[rl]", "model.preset=nano",
         "task.name=dataset", "task.data.path={d}/rows.jsonl", "--out", "{d}/o"],
        "no column 'prompt' (the prompt column); its columns: text, answer"),
    "train: a dataset file that is not JSON lines": (
        ["train", "configs/quickstart.yaml", "stages=[rl]", "model.preset=nano",
         "task.name=dataset", "task.data.path={d}/bad.jsonl", "--out", "{d}/o"],
        "cannot read dataset"),
    "sft: a config without an sft stage": (["sft", "configs/tau.yaml"], "has no sft stage"),
    "replay: not episodes": (["replay", "{d}/bad.jsonl"], "malformed episode"),
    "view: not a run directory": (["view", "{d}/empty"],
                                   "not a run directory (no metrics.jsonl): {d}/empty"),
    "config explain: a missing config": (["config", "explain", "{d}/none.yaml"],
                                         "does not exist"),
    "tau check: an unknown domain": (["tau", "check", "--domain", "nope"], "unknown tau domain"),
    "build-tiny: a path under a file": (["build-tiny", "{d}/file.txt/x"], "cannot write"),
    "filter: a directory without a model": (
        ["filter", "configs/quickstart.yaml", "--model", "{d}/empty", "--out", "{d}/f.jsonl"],
        "has no config.json"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_code_2(case, inputs):
    args, says = CASES[case]
    result = runner.invoke(app, [a.format(d=inputs) for a in args])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, (result.exception, text)
    assert "error:" in text and says.format(d=inputs) in text and "Traceback" not in text
