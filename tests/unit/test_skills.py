"""Skills: SKILL.md parsing and its errors, version bumps, the leakage audit, hybrid
retrieval checked against its formula, and the bank's add / merge / discard / maintain."""

import asyncio
import math

import numpy as np
import pytest

from posttrain.features.skills import (
    Skill,
    SkillBank,
    SkillDisclosure,
    SkillError,
    SkillIndex,
    audit,
    bump,
    hashed_embedding,
    load_skill,
    write_skill,
)
from posttrain.features.skills.retrieval import words

CARRY = Skill("column-addition", "Add multi-digit numbers column by column with carries.",
              "Write the numbers right-aligned. Add each column from the right; carry 1 when a "
              "column sums to ten or more.", ("addition", "carry"))


def write(tmp_path, name, front, body="Do the thing.", files=()):
    d = tmp_path / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\n{front}---\n{body}\n")
    for rel, text in files:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def test_a_skill_reads_back_what_was_written(tmp_path):
    d = write_skill(CARRY, tmp_path)
    (d / "scripts").mkdir()
    (d / "scripts" / "check.py").write_text("print('ok')\n")
    loaded = load_skill(d)
    assert loaded == Skill(**{**CARRY.__dict__, "files": ("scripts/check.py",)})
    assert loaded.metadata() == ("column-addition (v0.1.0): Add multi-digit numbers column by "
                                 "column with carries.")


@pytest.mark.parametrize("front,says", [
    ("name: other\ndescription: x\n", "equal the directory's name 'skill-a'"),
    ("name: Skill_A\ndescription: x\n", "lower-case words"),
    ("name: skill-a\n", "description must be a str"),
    ("name: skill-a\ndescription: x\nversion: '1.2'\n", "not MAJOR.MINOR.PATCH"),
    ("name: skill-a\ndescription: x\ntriggers: ['']\n", "triggers must be non-empty"),
    ("name: skill-a\ndescription: x\nauthor: me\n", "unknown front matter keys ['author']"),
    ("name: [\n", "front matter is not YAML"),
])
def test_a_malformed_skill_names_its_file_and_field(tmp_path, front, says):
    d = write(tmp_path, "skill-a", front)
    with pytest.raises(SkillError, match=r"skill-a/SKILL.md: .*") as e:
        load_skill(d)
    assert says in str(e.value)
    (d / "SKILL.md").write_text("no front matter\n")
    with pytest.raises(SkillError, match="no front matter"):
        load_skill(d)


def test_versions_bump_by_part():
    assert (bump("0.1.9"), bump("0.1.9", "minor"), bump("1.4.2", "major")) == (
        "0.1.10", "0.2.0", "2.0.0")
    with pytest.raises(SkillError):
        bump("1.2", "patch")


def test_the_audit_finds_task_files_expected_values_and_paths(tmp_path):
    leaky = Skill("leaky", "Solve it.", "Open solution.py; the answer is 4821, not 48210 or "
                  "4821.5.", files=("scripts/run.sh",))
    d = tmp_path / "leaky"
    (d / "scripts").mkdir(parents=True)
    (d / "scripts" / "run.sh").write_text("cat /home/u/task/tests/test_sum.py\n")
    found = audit(leaky, d, task_files=["task/solution.py", "tests/test_sum.py"],
                  expected=["4821"])
    assert [(f.where, f.kind, f.text) for f in found] == [
        ("SKILL.md", "task file", "solution.py"), ("SKILL.md", "expected value", "4821"),
        ("scripts/run.sh", "task file", "test_sum.py"),
        ("scripts/run.sh", "absolute path", "/home/u/task/tests/test_sum.py")]
    assert audit(CARRY, task_files=["solution.py"], expected=["4821", "10"]) == []


def bm25_plus(docs, query, k1=1.5, b=0.75, delta=1.0):
    """BM25+ (Lv and Zhai 2011) by hand: sum over query terms in the corpus of
    log((N + 1) / df) * (delta + tf (k1 + 1) / (tf + k1 (1 - b + b |D| / avgdl)))."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    scores = []
    for d in docs:
        total = 0.0
        for q in query:
            df = sum(q in other for other in docs)
            if df:
                tf = d.count(q)
                total += math.log((n + 1) / df) * (
                    delta + tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl)))
        scores.append(total)
    return np.array(scores)


def test_a_two_skill_bank_ranks_the_skill_that_shares_the_query_words_first():
    # (BM25 Okapi's idf is log(1.5 / 1.5) = 0 for a word in one of two documents)
    index = SkillIndex([CARRY, Skill("long-division", "Divide step by step.", "Divide.")],
                       lam=0.0, threshold=0.5)
    assert index.relevance("divide 96 by 4").tolist() == [0.0, 1.0]
    assert [s.name for s in index.retrieve("divide 96 by 4")] == ["long-division"]


def test_relevance_is_the_formula_over_min_max_normalised_scores():
    skills = [CARRY, Skill("long-division", "Divide step by step.", "Bring down the next "
                           "digit; subtract the multiple."),
              Skill("unit-check", "Check units.", "Compare the units of both sides."),
              Skill("answer-format", "Answer in tags.", "Put the answer in <answer> tags.",
                    general=True)]
    fixed = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])  # the three retrievable ones

    def embed(texts):
        return fixed if len(texts) == 3 else np.array([[0.8, 0.6]])

    index = SkillIndex(skills, embed=embed, lam=0.25, threshold=0.5, top_k=1)
    query = "add 57 and 68 with a carry"
    lexical = bm25_plus([words(s.text()) for s in skills[:3]], words(query))
    semantic = fixed @ np.array([0.8, 0.6])  # 0.8, 0.96, 0.6

    def norm(x):
        return (x - x.min()) / (x.max() - x.min())

    want = 0.25 * norm(semantic) + 0.75 * norm(np.asarray(lexical))
    np.testing.assert_allclose(index.relevance(query), want, rtol=1e-12)
    assert want[0] == pytest.approx(0.25 * (0.2 / 0.36) + 0.75)  # the only lexical match
    # the general skill always, then the best one over the threshold (top_k=1)
    assert [s.name for s in index.retrieve(query)] == ["answer-format", "column-addition"]
    # a trigger phrase in the query ("carry") calls its skill up whatever its relevance
    high = SkillIndex(skills, threshold=1.01)
    assert [s.name for s in high.retrieve(query)] == ["answer-format", "column-addition"]
    assert [s.name for s in high.retrieve("divide 57 by 3")] == ["answer-format"]
    # a lone skill that matches at all is fully relevant (min-max of equal scores)
    lone = SkillIndex([skills[1]], threshold=1.0)
    assert lone.relevance("divide it").tolist() == [1.0]
    assert lone.relevance("zebra").tolist() == [0.0]


def test_the_hashed_embedding_is_a_deterministic_unit_vector():
    a, b = hashed_embedding(["carry the one", "carry the one"]), hashed_embedding(["carry the one"])
    np.testing.assert_array_equal(a[0], b[0])
    assert float(a[0] @ a[1]) == pytest.approx(1.0) and hashed_embedding([""])[0].sum() == 0


def test_the_bank_adds_merges_discards_and_maintains(tmp_path):
    bank = SkillBank(tmp_path / "bank")
    bank.add(CARRY)
    with pytest.raises(SkillError, match="exists"):
        bank.add(CARRY)
    with pytest.raises(SkillError, match="leaks task data"):
        bank.add(Skill("cheat", "Cheat.", "Print 4821."), expected=["4821"])
    merged = bank.merge("column-addition", Skill("column-addition", "", "", ("sum",)))
    assert (merged.version, merged.triggers, merged.body) == (
        "0.1.1", ("addition", "carry", "sum"), CARRY.body)
    assert SkillBank(tmp_path / "bank")["column-addition"] == merged  # as written
    bank.add(Skill("unit-check", "Check units.", "Compare the units of both sides."))
    near = Skill("carry-addition", CARRY.description, CARRY.body + " Check the last carry.")
    assert bank.maintain(near)[0] == "merge"  # into column-addition, its near twin
    assert bank["column-addition"].version == "0.1.2"
    assert bank.maintain(Skill("cheat", "Cheat.", "Print 4821."), expected=["4821"]) == (
        "discard", None)
    decision, added = bank.maintain(Skill("long-division", "Divide step by step.",
                                          "Bring down the next digit."))
    assert decision == "add" and added.name == "long-division"
    moved = bank.discard("unit-check")
    assert moved == tmp_path / "bank" / ".discarded" / "unit-check-0.1.0"
    assert (moved / "SKILL.md").is_file()
    assert [s.name for s in SkillBank(tmp_path / "bank").skills] == [
        "column-addition", "long-division"]


def test_a_bank_with_a_broken_skill_lists_every_broken_one(tmp_path):
    write(tmp_path, "good", "name: good\ndescription: fine\n")
    write(tmp_path, "bad-one", "name: bad-one\n")
    write(tmp_path, "bad-two", "name: other\ndescription: x\n")
    with pytest.raises(SkillError, match="2 skills in .* cannot be used") as e:
        SkillBank(tmp_path)
    assert "bad-one/SKILL.md" in str(e.value) and "bad-two/SKILL.md" in str(e.value)


def test_disclosure_shows_general_and_triggered_skills_in_full_and_lists_the_rest():
    skills = [CARRY, Skill("answer-format", "Answer in tags.", "Put the answer in <answer> "
                           "tags.", general=True),
              Skill("digit-sum", "Add the digits of a number.", "Sum every digit; carry "
                    "as in column addition.", ("digits",))]
    disclosure = SkillDisclosure(SkillIndex(skills, threshold=0.0, top_k=2))
    opened = disclosure.opening([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Add 57 and 68 with a carry."}])
    system = opened[0]["content"]
    assert system.startswith("Be brief.\n\n## Skill: answer-format (v0.1.0)\nPut the answer")
    assert "## Skill: column-addition" in system  # its trigger 'carry' is in the task
    assert "- digit-sum (v0.1.0): Add the digits of a number." in system  # listed only
    assert "Sum every digit" not in system
    assert opened[1:] == [{"role": "user", "content": "Add 57 and 68 with a carry."}]
    read = disclosure.tool()
    assert read.schema["function"]["name"] == "read_skill"
    assert asyncio.run(read({"name": "digit-sum"})).startswith("## Skill: digit-sum")
    assert "skills: answer-format, column-addition, digit-sum" in asyncio.run(
        read({"name": "nope"}))
    alone = SkillDisclosure(SkillIndex([], threshold=0.0))
    assert alone.opening([{"role": "user", "content": "hi"}]) == [
        {"role": "user", "content": "hi"}]
