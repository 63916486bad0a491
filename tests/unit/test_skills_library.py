"""Skills as a run uses them: the library's tools (read_skill, run_skill_script in the
sandbox), tasks that see the bank as it is when they open, withholding, a checkpoint's
snapshot and restore, SkillRL's teacher and evolution, and the SkillsBench gain."""

import asyncio
import math

import pytest
from tests.integration.skill_teacher import teach

from posttrain.config.sections.skills import LESSON_PROMPT
from posttrain.features.skills import Skill, SkillBank, SkillError, write_skill
from posttrain.features.skills.bench import normalised_gain, skills_bench
from posttrain.features.skills.evolution import SkillEvolution
from posttrain.features.skills.library import SkilledTasks, SkillLibrary
from posttrain.features.skills.skill import parse_skill, skill_text
from posttrain.features.skills.teacher import ChatTeacher, as_skill
from posttrain.harness import ToolRegistry
from posttrain.types import Episode, Segment

CARRY = Skill("column-addition", "Add multi-digit numbers column by column with carries.",
              "Add each column from the right; carry the ten.", ("addition",))
SUM_SCRIPT = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"


class Task:
    def __init__(self, question, reference="0"):
        self.question, self.reference, self.domain = question, reference, "addition"

    def messages(self):
        return [{"role": "user", "content": self.question}]


def library(tmp_path, *skills, **options):
    for s in skills or (CARRY,):
        write_skill(s, tmp_path / "bank")
    return SkillLibrary(SkillBank(tmp_path / "bank"), **options)


def call(registry, tool, **arguments):
    return asyncio.run(registry.tools[tool](arguments))


def test_skill_text_parses_back_to_the_skill():
    assert parse_skill(skill_text(CARRY)) == CARRY
    with pytest.raises(SkillError, match="the teacher's SKILL.md: no front matter"):
        as_skill("just prose")
    fenced = "```markdown\n" + skill_text(CARRY) + "```"
    assert as_skill(fenced) == CARRY and as_skill(None) is None and as_skill(CARRY) is CARRY


def test_the_tools_read_a_skill_and_run_its_script_in_the_sandbox(tmp_path):
    library(tmp_path)
    scripts = tmp_path / "bank" / CARRY.name / "scripts"
    scripts.mkdir()
    (scripts / "total.py").write_text(SUM_SCRIPT)
    lib = SkillLibrary(SkillBank(tmp_path / "bank"))
    tools = ToolRegistry(lib.tools())
    assert "carry the ten" in call(tools, "read_skill", name="column-addition")
    assert "Files: scripts/total.py" in call(tools, "read_skill", name="column-addition")
    assert call(tools, "run_skill_script", skill="column-addition", script="total.py",
                input="17 25 100") == "exit code 0\n142"
    assert call(tools, "run_skill_script", skill="column-addition",
                script="nope.py") == "no script 'nope.py'; scripts: total.py"
    assert call(tools, "run_skill_script", skill="nope",
                script="total.py") == "no skill 'nope'; skills: column-addition"


def test_a_task_opens_with_the_bank_as_it_is_then_and_keeps_its_own_attributes(tmp_path):
    lib = library(tmp_path)
    tasks = SkilledTasks(type("Source", (), {"eval_set": lambda self, n: [Task("3+4 addition")],
                                             "seed": 7})(), lib)
    (task,) = tasks.eval_set(1)
    assert task.reference == "0" and task.domain == "addition" and tasks.seed == 7
    assert "carry the ten" in task.messages()[0]["content"]
    lib.maintain(Skill("column-addition", "", "Add each column; carry the ten; check twice."))
    assert "check twice" in task.messages()[0]["content"]  # the merged skill, v0.1.1
    with lib.withheld():
        assert task.messages() == Task("3+4 addition").messages()
        assert "skills: none" in lib.run_script("column-addition", "x.py")
    assert "check twice" in task.messages()[0]["content"]


def test_a_snapshot_restores_the_bank_discarded_skills_included(tmp_path):
    lib = library(tmp_path)
    saved = lib.snapshot()
    lib.maintain(Skill("zeta-lesson", "Unrelated words entirely.", "Mind the zeta."))
    lib.bank.discard("column-addition")
    assert [s.name for s in lib.bank.skills] == ["zeta-lesson"]
    after = lib.snapshot()
    lib.restore(saved)
    assert [s.name for s in lib.bank.skills] == ["column-addition"]
    assert lib.snapshot() == saved
    lib.restore(after)
    assert ".discarded/column-addition-0.1.0/SKILL.md" in lib.snapshot()
    assert "Mind the zeta" in lib.disclosure.read("zeta-lesson")


def test_the_chat_teacher_asks_for_a_lesson_with_the_trajectory():
    asked = []
    teacher = ChatTeacher(lambda convs: asked.extend(convs) or ["reply"])
    assert teacher("T R A J", "42", success=False) == "reply"
    assert asked == [[{"role": "user", "content": LESSON_PROMPT.format(trajectory="T R A J")}]]
    assert "42" not in asked[0][0]["content"]


class CharTokenizer:
    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def episode(text, correct, reference="57"):
    ids = [ord(c) for c in text]
    return Episode([Segment(ids, [0] + [1] * (len(ids) - 1), [0.0] * len(ids), [0] * len(ids))],
                   {"correct": float(correct)}, meta={"reference": reference})


def test_evolution_turns_failures_into_lessons_and_successes_into_skills(tmp_path):
    lib = library(tmp_path)
    evolve = SkillEvolution(lib, teach, CharTokenizer(), "correct", every=2, per_round=2,
                            below=0.9)
    # failures: length 9 (a lesson), 8 (quotes the reference: discarded), 14 (rejected);
    # successes: 4 (worked-1) and 7 (worked-1 again: merged)
    eps = [episode("a" * 9, 0), episode("b" * 8, 0), episode("c" * 4, 1),
           episode("d" * 7, 1), episode("e" * 14, 0)]
    assert evolve(0, eps)["skills/add"] == 0  # not an evolution step (every 2)
    metrics = evolve(1, eps)
    assert metrics == {"skills/add": 2.0, "skills/merge": 1.0, "skills/discard": 1.0,
                       "skills/rejected": 0.0, "skills/failed": 0.0, "skills/bank": 3.0}
    assert sorted(s.name for s in lib.bank.skills) == ["column-addition", "lesson-0",
                                                       "worked-1"]
    assert lib.bank["worked-1"].version == "0.1.1"
    assert "57" not in lib.snapshot().__repr__()
    per_round_1 = SkillEvolution(lib, teach, CharTokenizer(), "correct", per_round=1)
    assert per_round_1(0, [episode("e" * 14, 0)])["skills/rejected"] == 1.0
    assert SkillEvolution(lib, teach, CharTokenizer(), "correct", below=0.3)(
        0, eps)["skills/bank"] == 3.0  # accuracy 0.4 is not below 0.3: nothing taught


def test_a_teacher_that_raises_is_counted_and_the_run_goes_on(tmp_path):
    def broken(trajectory, reference, success):
        raise ConnectionError("endpoint down")

    lib = library(tmp_path)
    metrics = SkillEvolution(lib, broken, CharTokenizer(), "correct")(0, [episode("x", 0)])
    assert metrics["skills/failed"] == 1.0 and metrics["skills/bank"] == 1.0


def test_the_normalised_gain_is_the_share_of_the_headroom_closed():
    assert normalised_gain(0.6, 0.2) == pytest.approx(0.5)  # (0.6 - 0.2) / 0.8
    assert normalised_gain(0.1, 0.2) == pytest.approx(-0.125)
    assert normalised_gain(1.0, 1.0) is None


def test_the_protocol_reports_each_condition_against_vanilla(tmp_path):
    lib = library(tmp_path)
    tasks = [Task(f"{a}+{b} addition") for a, b in ((15, 27), (11, 22), (38, 44), (10, 10))]

    def pass_rates(played):  # passes when a carry skill is in its opening messages
        return [1.0 if "carry" in t.messages()[0]["content"].lower() else
                0.5 if "column" in t.messages()[0]["content"] else 0.0 for t in played]

    class Writer:
        def tasks(self, plain):
            return [lib.task(t) for t in plain[:0]] + [
                type("T", (), {"messages": lambda s, t=t: [{"role": "system",
                                                            "content": "go column-wise"},
                                                           *t.messages()]})() for t in plain]

    report = skills_bench(pass_rates, tasks, lib, Writer())
    c = report["conditions"]
    assert report["tasks"] == 4 and c["vanilla"]["pass"] == 0.0
    assert c["skills"] == {"pass": 1.0, "stderr": 0.0, "delta": 1.0, "gain": 1.0,
                           "tasks_better": 4, "tasks_worse": 0}
    assert c["self_generated"]["pass"] == 0.5 and c["self_generated"]["gain"] == 0.5
    assert math.isclose(c["vanilla"]["stderr"], 0.0)
