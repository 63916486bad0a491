"""Harness search: the outer loop improves the search-set score of a student that carries
only when a skill says so (the proposer reads the store's failed traces and proposes a skill
bank), the frontier is recomputed from the store's files alone, a broken candidate is a
recorded error, a resumed search continues without redoing a candidate, and the CLI runs it
with the mutation proposer."""

import json
import re

import pytest
import yaml
from tests.integration import harness_proposer
from tests.integration.agent_helpers import ScriptedEngine, no_carry, student
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.harness_search import HarnessSearch, HarnessStore, pareto
from posttrain.recipes.outer.harness_search import harness_evaluator


@pytest.fixture
def search(tmp_path, tokenizer):
    store = HarnessStore(tmp_path / "store")
    evaluate = harness_evaluator("configs/quickstart.yaml", ["task.digits=2"], store,
                                 ScriptedEngine(tokenizer, student), tokenizer, 20, 20)
    calls = []

    def counted(candidate, split):
        calls.append((candidate.id, split))
        return evaluate(candidate, split)

    harness_proposer.CALLS.clear()
    return store, counted, calls


def test_the_search_finds_the_skill_and_its_frontier_is_the_stores(search):
    store, evaluate, calls = search
    report = HarnessSearch(store, evaluate, harness_proposer.propose, k=3, iterations=1).run()
    results = HarnessStore(store.root).results()  # read back from the files alone
    start = results["i00-0"]
    assert 0 < start.score < 1  # carry-free sums only
    assert report["pick"] == "i01-0" and report["pick_search_score"] == 1.0
    assert report["pick_test"]["score"] == 1.0 and report["start_score"] == start.score
    assert results["i01-0"].tokens > start.tokens  # the skill costs context
    vague = results["i01-1"]  # as good as the start, with more context: dominated
    assert vague.score == start.score and vague.tokens > start.tokens
    assert results["i01-2"].error.startswith("ConfigError") and "task.bogus" in \
        results["i01-2"].error
    assert [f["id"] for f in report["frontier"]] == pareto(results)
    assert pareto(results) == ["i01-0", "i00-0"]
    traces = store.traces("i00-0")
    assert len(traces) == 20 and all(set(t) >= {"text", "passed", "rewards"} for t in traces)
    failed = [t for t in traces if not t["passed"]]
    assert len(failed) == round(20 * (1 - start.score))
    # a failure's trace holds the no-carry sum the student wrote
    assert any(f"<answer>{no_carry(a, b)}</answer>" in failed[0]["text"]
               for a in range(100) for b in range(100)
               if f"What is {a:02d}+{b:02d}?" in failed[0]["text"])
    assert (store.path("i01-0") / "skills/column-addition/SKILL.md").is_file()


def test_a_resumed_search_asks_only_for_the_next_iteration(search):
    store, evaluate, calls = search
    HarnessSearch(store, evaluate, harness_proposer.propose, k=3, iterations=1).run()
    done = [c for c in calls if c[1] == "search"]
    calls.clear()
    report = HarnessSearch(store, evaluate, harness_proposer.propose, k=3, iterations=2).run()
    assert harness_proposer.CALLS == [1, 2]
    assert [c for c in calls if c[1] == "search"] == [("i02-0", "search"),
                                                      ("i02-1", "search")]
    assert len(done) == 4 and report["candidates"] == 6  # i02 proposed no new skill


def test_the_cli_searches_with_the_mutation_proposer_and_resumes(tiny_dir, tmp_path):
    # four budgets: the start (none) and i01's two leave two new harnesses for i02
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"eval.max_new_tokens": [2, 4, 6, 8]}))
    args = ["harness-search", "configs/quickstart.yaml", f"out_dir={tmp_path / 'x'}",
            "--model", str(tiny_dir), "--space", str(tmp_path / "space.yaml"), "--k", "2",
            "--search-tasks", "3", "--test-tasks", "2", "--out", str(tmp_path / "s")]
    store = HarnessStore(tmp_path / "s")

    def evaluated(output):  # the ids the CLI printed as it evaluated them, in order
        return re.findall(r"^(i\d\d-\d) \(", output, flags=re.MULTILINE)

    def files():  # a rewritten file (write_atomic: a new inode) is a re-evaluation
        return {str(f.relative_to(store.root)): (f.stat().st_ino, f.stat().st_mtime_ns)
                for f in sorted(store.root.rglob("*")) if f.is_file()
                and (f.name in ("result.json", "traces.jsonl") or f.parent.name == "proposals")}

    first = CliRunner().invoke(app, [*args, "--iterations", "1"])
    assert first.exit_code == 0, first.output
    report = json.loads((tmp_path / "s" / "search.json").read_text())
    assert report["candidates"] == 3 and len(report["frontier"]) >= 1
    assert evaluated(first.output) == ["i00-0", "i01-0", "i01-1"]
    before, kept = store.results(), files()
    assert sorted(before) == ["i00-0", "i01-0", "i01-1"]
    again = CliRunner().invoke(app, [*args, "--iterations", "1"])
    assert again.exit_code == 2 and "--resume" in again.output
    assert files() == kept  # the refused run touched nothing
    resumed = CliRunner().invoke(app, [*args, "--iterations", "2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    # the resume evaluated i02's two new harnesses, and only them
    assert evaluated(resumed.output) == ["i02-0", "i02-1"]
    after = store.results()
    assert sorted(after) == ["i00-0", "i01-0", "i01-1", "i02-0", "i02-1"]
    assert json.loads((tmp_path / "s" / "search.json").read_text())["candidates"] == 5
    assert {k: v for k, v in files().items() if not k.startswith(("candidates/i02-",
                                                                   "proposals/i02"))} == kept
    assert all(after[c] == before[c] for c in before)
    overrides = {c.id: c.overrides for c in store.candidates()}
    new = [overrides["i02-0"], overrides["i02-1"]]
    assert new[0] != new[1] and not any(o in new for c, o in overrides.items()
                                        if not c.startswith("i02-"))
    assert sorted(o["eval.max_new_tokens"] for c, o in overrides.items() if c != "i00-0") == \
        [2, 4, 6, 8]
