"""Every command meets bad input with one line naming the problem and exit code 2: missing or
broken files, directories that are not models, data without a valid row, unknown names."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app

runner = CliRunner()


@pytest.fixture
def inputs(tmp_path, tiny_dir):
    (tmp_path / "file.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text("garbage\n")
    (tmp_path / "rows.jsonl").write_text('{"text": "What is 1+1?", "answer": 2}\n' * 4)
    (tmp_path / "bank" / "bad-skill").mkdir(parents=True)
    (tmp_path / "bank" / "bad-skill" / "SKILL.md").write_text("no front matter\n")
    (tmp_path / "model").symlink_to(tiny_dir)  # a model (the session's)
    shutil.copytree(tiny_dir, tmp_path / "base")  # ... and one without a chat template
    (tmp_path / "base" / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((tmp_path / "base" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (tmp_path / "base" / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


CASES = {
    "eval: a directory without a model": (["eval", "{d}/empty"], "has no config.json"),
    "eval: a base model without a chat template": (
        ["eval", "{d}/base", "eval.num_problems=2"],
        "the tokenizer of {d}/base has no chat template (a base model?): posttrain renders "
        "every prompt as a chat; write one to {d}/base/chat_template.jinja"),
    "train: a base model without a chat template": (
        ["train", "configs/quickstart.yaml", "model.path={d}/base", "stages=[rl]",
         "eval.num_problems=2", "--out", "{d}/o"], "has no chat template"),
    "import-gguf: neither a file, a folder nor a package": (
        ["import-gguf", "no_such_package", "{d}/m"],
        "no_such_package is neither a .gguf file, a folder, nor an installed package"),
    "eval: a missing config": (["eval", "{d}/empty", "--config", "{d}/none.yaml"],
                               "does not exist"),
    "train: a missing config": (["train", "{d}/none.yaml"], "does not exist"),
    "train: a missing SFT file": (["train", "configs/quickstart.yaml", "stages=[sft]",
                                   "model.preset=nano", "sft.data={d}/none.jsonl", "--out",
                                   "{d}/o"], "SFT data '{d}/none.jsonl' does not exist"),
    "reward-model: pairs without a valid row": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano",
         "rm.data={d}/rows.jsonl", "out_dir={d}/o"],
        "holds no usable row (4 skipped; row 0, counting from 0: row needs 'chosen' and "
        "'rejected')"),
    "reward-model: pairs that are not JSON lines": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano", "rm.data={d}/bad.jsonl",
         "out_dir={d}/o"],
        "line 1 is not valid JSON (Expecting value, column 1; row 0 counting from 0)"),
    "reward-model: a missing pairs file": (
        ["reward-model", "configs/quickstart.yaml", "model.preset=nano",
         "rm.data={d}/none.jsonl", "out_dir={d}/o"], "does not exist"),
    "train: a dataset without the prompt column": (
        ["train", "configs/quickstart.yaml", "stages=[rl]", "model.preset=nano",
         "task.name=dataset", "task.data.path={d}/rows.jsonl", "--out", "{d}/o"],
        "no column 'prompt' (the prompt column: task.data.prompt); its columns: text, answer"),
    "train: a dataset file that is not JSON lines": (
        ["train", "configs/quickstart.yaml", "stages=[rl]", "model.preset=nano",
         "task.name=dataset", "task.data.path={d}/bad.jsonl", "--out", "{d}/o"],
        "cannot read dataset"),
    "sft: a config without an sft stage": (["sft", "configs/tau.yaml"], "has no sft stage"),
    "replay: not episodes": (["replay", "{d}/bad.jsonl"], "malformed episode"),
    "view: not a folder": (["view", "{d}/file.txt"],
                           "not a folder (a run's out_dir or a folder of runs): {d}/file.txt"),
    "config explain: a missing config": (["config", "explain", "{d}/none.yaml"],
                                         "does not exist"),
    "train: a missing skill bank": (
        ["train", "configs/quickstart.yaml", "skills.dir={d}/none", "--out", "{d}/o"],
        "no skill bank at {d}/none"),
    "train: a skill that does not parse": (
        ["train", "configs/quickstart.yaml", "skills.dir={d}/bank", "--out", "{d}/o"],
        "1 skills in {d}/bank cannot be used"),
    "train: a skill teacher without RL": (
        ["train", "configs/quickstart.yaml", "stages=[sft]", "skills.dir={d}/empty",
         "skills.teacher.function=tests/integration/skill_teacher.py:teach", "--out", "{d}/o"],
        "skills.teacher evolves the bank during the rl stage"),
    "train: skill evolution without a teacher": (
        ["train", "configs/quickstart.yaml", "skills.dir={d}/empty", "skills.per_round=3",
         "--out", "{d}/o"], "skills.per_round is set but cannot take effect"),
    "train: a teacher prompt with an unknown field": (
        ["train", "configs/quickstart.yaml", "skills.teacher.endpoint=http://x/v1",
         "skills.teacher.skill_prompt=Say {{answer}}", "--out", "{d}/o"],
        "skill_prompt: fields are {{trajectory}}"),
    "eval: the skills protocol without a bank": (
        ["eval", "{d}/empty", "--mode", "skills-bench"], "--mode skills-bench needs a skill bank"),
    "train: a guard rule that is no regex": (
        ["train", "configs/code.yaml", "agent.guard.rules=[{{name: x, pattern: '('}}]",
         "--out", "{d}/o"], "not a regular expression: missing ), unterminated subpattern"),
    "train: a swarm on a task whose episodes own an environment": (
        ["train", "configs/code.yaml", "agent.swarm.target=2", "--out", "{d}/o"],
        "agent.swarm: sub-agents share the task's tools, and the episodes of task.name=code "
        "cannot spawn them"),
    "train: a swarm with step-level credit": (
        ["train", "configs/swarm.yaml", "algo.adv_estimator=gigpo", "--out", "{d}/o"],
        "agent.swarm with algo.adv_estimator=gigpo: its step-level credit reads the "
        "orchestrator's steps"),
    "train: a swarm on a single-turn task": (
        ["train", "configs/quickstart.yaml", "agent.swarm.target=2", "--out", "{d}/o"],
        "agent.swarm set, but task.name=arithmetic is single-turn"),
    "env audit: a missing config": (["env", "audit", "{d}/none.yaml"], "does not exist"),
    "env audit: an unknown exploit": (["env", "audit", "configs/code.yaml", "--exploit", "nope"],
                                      "unknown exploits nope; known: workspace_answers"),
    "harness-search: no proposer": (
        ["harness-search", "configs/quickstart.yaml", "--model", "{d}/empty", "--out", "{d}/s"],
        "name one proposer: --space FILE, --proposer module:fn or --proposer-endpoint URL"),
    "harness-search: a model directory without a model": (
        ["harness-search", "configs/quickstart.yaml", "--model", "{d}/empty", "--space",
         "{d}/file.txt", "--out", "{d}/s"], "has no config.json"),
    "harness-search: a space that is no mapping": (
        ["harness-search", "configs/quickstart.yaml", "--model", "{d}/model", "--space",
         "{d}/file.txt", "--out", "{d}/s"], "the search space maps dotted config keys to lists"),
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
