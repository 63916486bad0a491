"""Skills in a run: every episode opens with the bank's skills (the agent loop also gets
read_skill and run_skill_script), the SkillsBench protocol on a task family where a skill
helps (a student who never carries, until a skill tells it to), and SkillRL's teacher
evolving the run's bank during RL, carried exactly through an interrupted and resumed run."""

import json

import pytest
from tests.integration.agent_helpers import ScriptedEngine, no_carry, student
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import load_config
from posttrain.features.skills import Skill, write_skill
from posttrain.features.skills.run import run_skills_bench
from posttrain.recipes.build import RunParts
from posttrain.recipes.sampling_loop import LoopRun
from posttrain.types import SamplingParams

CARRY = Skill("column-addition", "Add multi-digit numbers column by column.",
              "Add each column from the right and carry the ten into the next column.",
              ("addition", "+"))
TOTAL = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"


@pytest.fixture
def bank(tmp_path):
    d = write_skill(CARRY, tmp_path / "bank")
    (d / "scripts").mkdir()
    (d / "scripts" / "total.py").write_text(TOTAL)
    return tmp_path / "bank"


def test_the_protocol_measures_the_gain_of_a_skill_that_helps(bank, tokenizer):
    cfg = load_config("configs/quickstart.yaml", [
        f"skills.dir={bank}", "eval.num_problems=40", "task.digits=2"])
    parts = RunParts(cfg.model_copy(update={"out_dir": str(bank.parent / "run")}))
    engine = ScriptedEngine(tokenizer, student)
    report = run_skills_bench(parts, engine, tokenizer)
    problems = [t.task for t in parts.eval_tasks]
    carry_free = sum(no_carry(p.a, p.b) == p.a + p.b for p in problems) / len(problems)
    assert 0 < carry_free < 1  # the family has room for the skill to help
    c = report["conditions"]
    assert report["tasks"] == 40
    assert c["vanilla"]["pass"] == pytest.approx(carry_free)
    assert c["skills"]["pass"] == 1.0 and c["skills"]["gain"] == pytest.approx(1.0)
    assert c["skills"]["delta"] == pytest.approx(1 - carry_free)
    assert c["skills"]["tasks_better"] == round(40 * (1 - carry_free))
    assert c["self_generated"]["pass"] == pytest.approx(carry_free)
    assert c["self_generated"]["gain"] == pytest.approx(0.0)
    assert c["self_generated"]["tasks_worse"] == 0
    # the training tasks open with the skill too
    (task,) = parts.tasks.sample(1, __import__("random").Random(0))
    assert "carry the ten" in task.messages()[0]["content"]


def test_the_agent_loop_gets_the_skill_tools_and_runs_a_script(bank, tokenizer):
    cfg = load_config("configs/quickstart.yaml", [
        f"skills.dir={bank}", "task.name=calculator", "eval.num_problems=1",
        "agent.max_tokens=4096"])
    parts = RunParts(cfg.model_copy(update={"out_dir": str(bank.parent / "run")}))
    assert {"calculate", "read_skill", "run_skill_script"} <= set(parts.tools.tools)
    call = ('<tool_call>{"name": "run_skill_script", "arguments": {"skill": '
            '"column-addition", "script": "total.py", "input": "40 2"}}</tool_call>')
    engine = ScriptedEngine(tokenizer, [call, "<answer>42</answer>"])
    (episode,) = parts.rollout_fn(engine, tokenizer, parts.eval_tasks, parts.reward_fn,
                                  SamplingParams(max_new_tokens=256), 1)
    second_prompt = tokenizer.decode(engine.prompts[1])
    assert "## Skill: column-addition" in second_prompt
    assert "exit code 0\n42" in second_prompt  # the script ran in the sandbox


SMALL = ["model.preset=nano", "stages=[rl]", "rl.steps=4", "rl.prompts_per_step=2",
         "rl.group_size=2", "rl.max_new_tokens=8", "rl.eval_every=0", "eval.num_problems=2",
         "eval.max_new_tokens=4", "threads=1", "checkpoint_every=2",
         "skills.teacher.function=tests/integration/skill_teacher.py:teach", "skills.per_round=2"]


def train(out, bank, *extra):
    return CliRunner().invoke(app, ["train", "configs/quickstart.yaml", *SMALL,
                                    f"skills.dir={bank}", "--out", str(out), *extra])


def skill_metrics(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k.startswith("skills/")} for r in rows]


def files(directory):
    return {str(f.relative_to(directory)): f.read_text()
            for f in sorted(directory.rglob("*")) if f.is_file()}


def test_the_teacher_evolves_the_run_bank_and_a_resume_continues_it_exactly(
        bank, tmp_path, monkeypatch):
    through = tmp_path / "through"
    assert train(through, bank).exit_code == 0
    taught = skill_metrics(through)
    assert len(taught) == 4 and sum(m["skills/add"] + m["skills/merge"] for m in taught) > 0
    assert any(m["skills/discard"] for m in taught)  # a lesson that quoted the answer
    assert files(through / "skills") != files(bank)  # the run's own copy evolved...
    assert files(bank) == {"column-addition/SKILL.md": files(bank)["column-addition/SKILL.md"],
                           "column-addition/scripts/total.py": TOTAL}  # ...not the source
    finish = LoopRun.finish_step

    def interrupted(self, step, metrics):
        finish(self, step, metrics)
        if step + 1 == 3:  # the newest checkpoint is step 2's; step 3 changed the bank
            raise KeyboardInterrupt

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(LoopRun, "finish_step", interrupted)
    assert train(resumed, bank).exit_code == 130
    monkeypatch.setattr(LoopRun, "finish_step", finish)
    result = train(resumed, bank, "--resume")
    assert result.exit_code == 0, result.output
    assert skill_metrics(resumed) == taught
    assert files(resumed / "skills") == files(through / "skills")


def test_eval_plays_the_protocol_with_a_model_and_writes_its_report(bank, tiny_dir, tmp_path):
    result = CliRunner().invoke(app, [
        "eval", str(tiny_dir), "--mode", "skills-bench", "--out", str(tmp_path / "bench"),
        "--config", "configs/quickstart.yaml", f"skills.dir={bank}", "eval.num_problems=3",
        "eval.max_new_tokens=4", f"out_dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "bench" / "skills_bench.json").read_text())
    assert json.loads(result.stdout) == report
    assert report["tasks"] == 3 and set(report["conditions"]) == {
        "vanilla", "skills", "self_generated"}
    for c in ("skills", "self_generated"):
        row, p0 = report["conditions"][c], report["conditions"]["vanilla"]["pass"]
        assert row["delta"] == pytest.approx(row["pass"] - p0)
