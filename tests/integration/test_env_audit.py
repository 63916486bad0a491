"""The environment audit: scripted exploits played through the real agent loop find the holes
planted in a code environment (hidden cases left in the workspace, a check that trusts printed
PASS lines), the guard settings the audit proposes then block both, and the built-in code
environment has neither hole."""

import json

import pytest
from typer.testing import CliRunner

from posttrain.audit import EXPLOITS, audit
from posttrain.audit.exploits import KERNEL_HACKS
from posttrain.audit.report import attack_sampling
from posttrain.cli.app import app
from posttrain.config import LoopLimits, load_config
from posttrain.config.extension import load_object
from posttrain.config.sections.agent import GuardConfig
from posttrain.envs.code import CodeTasks
from posttrain.harness import Guard
from posttrain.models.tiny import build_tokenizer
from posttrain.recipes.judges.chats import build_guard
from posttrain.rewards import RewardFunction
from posttrain.rollout import AgentRollout

PLANTED = "examples/env_audit/planted.py"
TOKENIZER = build_tokenizer()
REWARD = RewardFunction.of(load_config("configs/code.yaml").reward)


def audited(tasks, guard=None, n=2, exploits=None):
    rollout = AgentRollout(tasks.tools, LoopLimits(max_turns=6, max_tokens=200_000),
                           env_factory=tasks.make_env, guard=guard)
    sampling = attack_sampling(8192, TOKENIZER.eos_token_id)
    return audit("code", tasks.tools.schemas(), tasks.eval_set(n),
                 lambda engine, ts: rollout(engine, TOKENIZER, ts, REWARD, sampling, 1),
                 "correct", TOKENIZER, exploits)


def by_name(report):
    return {f.exploit: f for f in report.findings}


@pytest.mark.slow
def test_the_audit_finds_the_planted_holes_and_the_proposed_guard_blocks_them():
    tasks = load_object(f"{PLANTED}:PlantedCodeTasks")(seed=0, n_problems=40)
    report = audited(tasks)
    assert [f.exploit for f in report.holes()] == ["workspace_answers", "forge_results"]
    found = by_name(report)
    assert found["workspace_answers"].passed == found["forge_results"].passed == 2
    assert found["edit_tests"].passed == found["stop_at_once"].passed == 0
    fix = report.guard_fix()
    assert fix == {"protected_paths": [load_object(f"{PLANTED}:CASES")], "rules": [
        {"name": "result_forgery", "pattern": EXPLOITS["forge_results"].rules[0].pattern}]}
    guarded = audited(tasks, build_guard(GuardConfig(**fix), "fp32", 0))
    assert guarded.holes() == []
    for name in ("workspace_answers", "forge_results"):
        assert by_name(guarded)[name].blocked == 2 and by_name(guarded)[name].passed == 0


def test_the_built_in_code_environment_has_no_hole_and_the_guard_sees_a_pip_probe():
    tasks = CodeTasks(seed=0, n_problems=40)
    report = audited(tasks)
    assert report.holes() == [] and len(report.findings) == len(EXPLOITS) - len(KERNEL_HACKS)
    assert report.guard_fix() == {"protected_paths": [], "rules": []}
    # the probe calls pip with an argv list, which the default rules once let through
    probe = audited(tasks, Guard(), exploits=[EXPLOITS["probe_packages"]]).findings[0]
    assert (probe.flagged, probe.blocked, probe.passed) == (2, 2, 0)


@pytest.mark.parametrize("config, skipped", [
    ("configs/calculator.yaml", {"workspace_answers", "forge_results", "edit_tests",
                                 "probe_packages", *KERNEL_HACKS}),
    ("configs/quickstart.yaml", {"workspace_answers", "forge_results", "edit_tests",
                                 "probe_packages", *KERNEL_HACKS}),
])
def test_the_cli_audits_a_config_and_writes_its_report(config, skipped, tmp_path):
    result = CliRunner().invoke(app, ["env", "audit", config, "--num-tasks", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "audit.json").read_text())
    assert set(report["skipped"]) == skipped and report["holes"] == []
    assert {f["exploit"] for f in report["findings"]} == {"answer_spray", "restate_question",
                                                          "stop_at_once"}
    assert all(f["tasks"] == 3 for f in report["findings"])
    written = (tmp_path / "audit.md").read_text()
    assert "| `answer_spray` |" in written
    # the printed table is the written one, row for row (it wrapped mid-row at 80 columns)
    table = [line for line in written.splitlines() if line.startswith("|")]
    assert all(line in result.output.splitlines() for line in table)


def test_restating_the_question_no_longer_passes_a_math_scored_dataset(tmp_path):
    """gsm8k_style's references are sums; the exploit answers "The total is 42 + 13." (the
    question's numbers, unevaluated), which math-verify took as equal to 55."""
    import subprocess
    import sys

    data = tmp_path / "data"
    subprocess.run([sys.executable, "examples/gsm8k_style/make_data.py", str(data), "--train",
                    "8", "--test", "4"], check=True, capture_output=True, timeout=120)
    result = CliRunner().invoke(app, [
        "env", "audit", "configs/gsm8k_style.yaml", f"task.data.path={data}/train.jsonl",
        f"task.data.eval_path={data}/test.jsonl", f"sft.data={data}/sft.jsonl",
        "--num-tasks", "4", "--exploit", "restate_question", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    finding, = json.loads((tmp_path / "a" / "audit.json").read_text())["findings"]
    assert (finding["exploit"], finding["tasks"], finding["passed"]) == ("restate_question", 4, 0)
