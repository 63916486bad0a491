"""Tool-environment synthesis (docs/synthesis.md): every kept environment passes its reference
solution and fails the empty answer; the validation names each planted defect; a draft sent
back with its reason is fixed and then made harder; duplicates are dropped; a model builder's
replies are parsed, and a tiny served model's failures are reported; a kept environment plays
through its own tools and verifier."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.envs.tool_env import ToolEnvFiles, ToolEnvRunner, ToolEnvTasks
from posttrain.synthesis.prompted import PromptedBuilder, draft_json, served_chat
from posttrain.synthesis.scripted import MAX_LEVEL, BuildRequest, ScriptedToolBuilder
from posttrain.synthesis.tool_envs import synthesize_tool_envs, validate


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "envs"
    return out, synthesize_tool_envs(ScriptedToolBuilder(0, flaw_rate=0.5), 6, out)


def test_kept_environments_pass_their_solution_and_fail_the_empty_answer(built):
    out, report = built
    assert report["kept"] == 6 and sum(report["levels"].values()) == 6
    # each planted flaw was caught and fixed: a draft either failed or validated its level,
    # and the loop went up a level after each valid one (until max_rounds drafts)
    assert set(report["failed_drafts"]) == {"the verifier rejects the reference solution's "
                                            "answer"}
    for row in report["environments"]:
        assert row["rounds"] == row["level"] + len(row["failures"]) <= 6
        assert row["level"] == MAX_LEVEL or row["rounds"] == 6
        env = ToolEnvFiles.load(out / row["kept"])
        runner = ToolEnvRunner(env)
        answer, calls = runner.solve()
        assert answer == env.spec["meta"]["trace"]["answer"] and len(calls) >= 2
        assert runner.verify(answer) is True and runner.verify("") is False


def draft(**changes) -> dict:
    files = ScriptedToolBuilder(1)(BuildRequest(0, 2))
    return {**files, **changes}


@pytest.mark.parametrize(("files", "reason"), [
    ({k: v for k, v in draft().items() if k != "verifier.py"}, "malformed: missing verifier.py"),
    (draft(**{"solution.py": "def solve(call):\n    return len(open('db.json').read())\n"}),
     "does not only call tools: it uses open"),
    (draft(**{"solution.py": "import json\ndef solve(call):\n    return 1\n"}),
     "does not only call tools: it imports"),
    (draft(**{"solution.py": "def solve(call):\n    return 42\n"}), "calls no tool"),
    (draft(**{"verifier.py": "def verify(db, answer):\n    return True\n"}),
     "leaky: the verifier accepts the empty answer, a refusal, an answer spray"),
    (draft(**{"verifier.py": "def verify(db, answer):\n    return 1 / 0\n"}),
     "the verifier failed: ZeroDivisionError"),
    (draft(**{"tools.py": "def find_x(db, name):\n    raise KeyError(name)\n"}),
     "the reference solution failed: AttributeError"),
])
def test_validation_names_each_planted_defect(files, reason):
    _, check = validate(files)
    assert reason in check.reason


def level_one(**changes) -> dict:
    files = ScriptedToolBuilder(1)(BuildRequest(0, 1))
    return {**files, **{name: edit(files[name]) for name, edit in changes.items()}}


def test_the_audit_rejects_a_leaky_a_flaky_and_an_unstable_environment():
    """A substring verifier lets an answer spray through; a verifier that flips a coin
    disagrees with itself over 20 runs (all 20 alike with probability 2 ** -19); a tool
    that answers at random makes the reference solution's second run differ."""
    assert validate(level_one())[1].ok
    leaky = level_one(**{"verifier.py": lambda v: v.replace(
        "answer.lower() == expected.lower()", "expected.lower() in answer.lower()")})
    assert validate(leaky)[1].reason == "leaky: the verifier accepts an answer spray"
    flaky = level_one(**{"verifier.py": lambda v: "import random\n" + v.replace(
        "return answer.lower() == expected.lower()",
        "return answer.lower() == expected.lower() and random.random() < 0.5")})
    assert validate(flaky, repeats=20)[1].reason.startswith("the verifier is flaky")
    unstable = level_one(**{"tools.py": lambda t: "import random\n" + t.replace(
        "return row", "return dict(row, city=str(random.random()))")})
    assert validate(unstable)[1].reason.startswith("the reference solution is unstable")


def test_duplicates_are_dropped_and_a_models_replies_are_parsed(tmp_path):
    same = ScriptedToolBuilder(2)

    def reply(messages):  # a model that writes one environment, whatever it is asked
        return "Here it is: " + draft_json(same(BuildRequest(0, 1))) + " Done."

    report = synthesize_tool_envs(PromptedBuilder(reply), 3, tmp_path / "envs", max_level=1)
    assert report["kept"] == 1 and report["dropped"] == {
        "duplicate: a kept task asks the same over the same database": 2}
    assert [r.get("duplicate_of") for r in report["environments"]][1:] == ["scripted-2-00000"] * 2
    asked = PromptedBuilder(reply).messages(BuildRequest(3, 2, same(BuildRequest(3, 1)),
                                                         "the verifier failed: KeyError"))
    assert asked[-1]["content"] == "That fails validation: the verifier failed: KeyError. " \
                                   "Fix it." and json.loads(asked[-2]["content"])["solution"]


def test_a_tiny_served_builders_failures_are_reported(tmp_path, tiny_dir):
    from posttrain.engines import TorchEngine
    from posttrain.models import load_model, load_tokenizer
    from posttrain.serve import Completer, Sessions, create_app, running

    tok = load_tokenizer(tiny_dir)
    engine = TorchEngine(load_model(tiny_dir), tok.pad_token_id, tok.eos_token_id)
    with running(create_app(Completer(engine, tok, 512, 32), Sessions(), "tiny")) as url:
        report = synthesize_tool_envs(PromptedBuilder(served_chat(url)), 3, tmp_path / "e",
                                      max_rounds=2)
    assert report["kept"] == 0 and report["drafts"] == 6
    assert sum(report["dropped"].values()) == 3
    assert all(k.startswith("the builder failed") for k in report["failed_drafts"])


def test_a_kept_environment_plays_through_its_tools_and_verifier(built):
    out, _ = built
    tasks = ToolEnvTasks(out, eval_fraction=0.2)
    problem = tasks.splits["train"][0]
    episode = tasks.make_env(problem.reference)
    name, arguments, result = problem.calls[0]
    call = next(iter(episode.tools.tools.values()))
    assert {t["function"]["name"] for t in episode.tools.schemas()} == set(
        problem.env.tool_names)
    import asyncio

    assert json.loads(asyncio.run(episode.tools.tools[name](arguments))) == result
    assert call.schema == problem.env.spec["tools"][0]
    assert episode.verdict(f"It is <answer>{problem.answer}</answer>") == {"correct": 1.0}
    assert episode.verdict("<answer>nobody</answer>") == {"correct": 0.0}
    held = {p.reference for p in tasks.splits["eval"]}
    assert held and not held & {p.reference for p in tasks.splits["train"]}


def test_the_command_writes_the_environments_and_refuses_a_used_directory(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.app import app

    out = tmp_path / "envs"
    result = CliRunner().invoke(app, ["synthesize", "tools", str(out), "--count", "2",
                                      "--max-level", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "report.json").read_text())["kept"] == 2
    assert len(list(out.glob("*/env.json"))) == 2
    again = CliRunner().invoke(app, ["synthesize", "tools", str(out), "--count", "2"])
    assert again.exit_code != 0 and "is not empty" in again.output


def test_knowledge_graph_tasks_follow_known_paths_of_a_dag(tmp_path):
    from posttrain.synthesis.knowledge_graph import (
        KINDS,
        KnowledgeGraphBuilder,
        build_graph,
        question,
    )

    graph = build_graph(0)
    order = {n: (KINDS.index(graph.kind[n]), i) for i, n in enumerate(graph.facts)}
    # down the kinds, or to an earlier entity of the same kind: a DAG
    assert all(order[v] > order[e] if graph.kind[v] != graph.kind[e] else order[v] < order[e]
               for e, fs in graph.facts.items() for r, v in fs)
    report = synthesize_tool_envs(KnowledgeGraphBuilder(0), 4, tmp_path / "kg", max_level=2)
    assert report["kept"] == 4 and report["levels"] == {"2": 4}
    for row in report["environments"]:
        env = ToolEnvFiles.load(tmp_path / "kg" / row["kept"])
        path = env.spec["meta"]["path"]
        assert len(path) == 3 and all([r, v] in graph.facts[e] for e, r, v in path)
        assert env.spec["task"] == question(path[0][0], [r for _, r, _ in path])
        runner = ToolEnvRunner(env)
        assert runner.verify_all([path[-1][2], path[-1][0]]) == [True, False]
        assert env.spec["meta"]["trace"]["answer"] == path[-1][2]


def scripted_solver(name, tokenizer, problems, solves, knows=(), seen=lambda task: None):
    """A solver that replays the reference trace of the tasks whose ids are in ``solves``
    (calls, then the answer), answers the ones in ``knows`` at once without tools, and says
    "unknown" to the others: a stand-in for a model whose skill the test sets. ``seen(id)``
    is told of every turn it plays."""
    from posttrain.audit.attacker import AttackerEngine
    from posttrain.audit.exploits import Exploit, call
    from posttrain.recipes.outer.task_filter import Solver

    def act(attempt):
        p = next(p for p in problems if p.env.spec["task"] in attempt.prompt)
        seen(p.reference)
        if p.reference in knows:
            return f"<answer>{p.answer}</answer>"
        if p.reference not in solves:
            return "<answer>unknown</answer>"
        if attempt.turn < len(p.calls):
            return call(p.calls[attempt.turn][0], **p.calls[attempt.turn][1])
        return f"<answer>{p.answer}</answer>"

    return Solver(name, AttackerEngine(tokenizer, Exploit(name, "", (), act)), tokenizer)


def test_the_solver_pool_keeps_what_some_solver_passes_and_nothing_answered_closed_book(
        tmp_path, tokenizer):
    from posttrain.recipes.outer.task_filter import filter_tasks
    from posttrain.synthesis.knowledge_graph import KnowledgeGraphBuilder

    synthesize_tool_envs(KnowledgeGraphBuilder(0), 6, tmp_path / "kg", max_level=1)
    problems = sorted(ToolEnvTasks(tmp_path / "kg").problems.values(),
                      key=lambda p: p.reference)
    assert len({p.env.spec["task"] for p in problems}) == 6  # the solvers tell them apart
    ids = [p.reference for p in problems]
    a = scripted_solver("a", tokenizer, problems, solves=set(ids[:4]))
    b = scripted_solver("b", tokenizer, problems, solves={ids[0]})
    book = scripted_solver("book", tokenizer, problems, solves=set(), knows={ids[1]})
    kept, dropped = filter_tasks(problems, [a, b], 2, [book], require_failure=False)
    assert set(kept) == {ids[0], ids[2], ids[3]}
    assert dropped == {ids[1]: "answered without tools by book",
                       ids[4]: "no solver passed in 2 tries", ids[5]: "no solver passed in 2 tries"}
    assert kept[ids[0]] == {"pass_rates": {"a": 1.0, "b": 1.0}, "difficulty": 0.0}
    assert kept[ids[2]] == {"pass_rates": {"a": 1.0, "b": 0.0}, "difficulty": 0.5}
    kept, dropped = filter_tasks(problems, [a, b], 2, require_failure=True)
    assert dropped[ids[0]] == "every solver passed all 2 tries" and ids[1] in kept


HOLD = """import os
import time

from posttrain.synthesis.scripted import ScriptedToolBuilder

scripted = ScriptedToolBuilder(0)


def build(request):
    if request.index >= 2 and os.environ.get("HOLD"):  # a slow builder, stopped here
        time.sleep(60)
    return scripted(request)
"""


# the command line, with Ctrl-C's handler even where the test runs with SIGINT ignored (in a
# background job)
CLI = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "from posttrain.cli.app import app; app()")


def journal_rows(out):
    path = out / "progress.jsonl"
    return path.read_text().count("\n") if path.is_file() else 0


def test_ctrl_c_keeps_what_was_built_and_says_the_command_that_finishes_it(tmp_path):
    """A real SIGINT while environment 2 is built: exit code 130 and the command that
    continues (it exited silently, without report.json); the same command without --resume is
    refused; the printed one builds the rest, the same as an uninterrupted run."""
    (tmp_path / "hold.py").write_text(HOLD)
    out = tmp_path / "envs"
    args = ["synthesize", "tools", str(out), "--count", "4", "--max-level", "1",
            "--builder", f"{tmp_path / 'hold.py'}:build"]
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOLD": "1", "COLUMNS": "1000"})
    deadline = time.monotonic() + 60
    while journal_rows(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"interrupted. 2 environments are done and kept in {out}; continue with:" in err
    [line] = [x for x in err.splitlines() if x.strip().startswith("posttrain synthesize")]
    again = shlex.split(line)
    assert again[-1] == "--resume" and not (out / "report.json").exists()
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "--resume continues the synthesis" in refused.output
    resumed = CliRunner().invoke(app, again[1:])
    assert resumed.exit_code == 0, resumed.output
    whole = synthesize_tool_envs(ScriptedToolBuilder(0), 4, tmp_path / "whole", max_level=1)
    assert json.loads((out / "report.json").read_text()) == whole
    assert journal_rows(out) == 4


def test_resume_cuts_back_to_the_journal_and_overwrite_removes_only_what_synthesis_wrote(
        tmp_path):
    from posttrain.synthesis.out_dir import OutDirError, claim, finished

    out = tmp_path / "envs"
    settings = {"count": 3, "seed": 0}
    claim(out, "kg", settings, resume=False, overwrite=False)
    synthesize_tool_envs(ScriptedToolBuilder(0), 2, out, max_level=1)
    (out / "report.json").unlink()
    left = ToolEnvFiles.load(next(out.glob("*/env.json")).parent)
    left.save(out / "half-done")  # an environment the journal does not name: interrupted
    (out / "torn.tmp").mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutDirError, match=r"seed differ from its synthesis.json"):
        claim(out, "kg", {"count": 3, "seed": 1}, resume=True, overwrite=False)
    with pytest.raises(OutDirError, match=r"not `synthesize tools`"):
        claim(out, "tools", settings, resume=True, overwrite=False)
    claim(out, "kg", {"count": 5, "seed": 0}, resume=True, overwrite=False)  # count may grow
    kept = {r["kept"] for r in finished(out)}
    assert len(kept) == 2
    assert {p.name for p in out.iterdir()} == kept | {"progress.jsonl", "synthesis.json",
                                                     "notes.txt"}
    claim(out, "kg", settings, resume=False, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "synthesis.json"]
    with pytest.raises(OutDirError, match=r"is not empty \(notes.txt\)"):
        claim(out, "kg", settings, resume=False, overwrite=False)
    (out / "notes.txt").unlink()
    claim(out, "kg", settings, resume=False, overwrite=False)  # what a failed start left
    old = tmp_path / "old"  # what an older posttrain wrote: no synthesis.json
    synthesize_tool_envs(ScriptedToolBuilder(0), 1, old, max_level=1)
    (old / "progress.jsonl").unlink()
    with pytest.raises(OutDirError, match="nothing to resume"):
        claim(old, "kg", settings, resume=True, overwrite=False)


def test_an_interrupted_filter_resumes_without_playing_a_batch_again(tmp_path, tokenizer):
    from posttrain.config import LoopLimits
    from posttrain.recipes.outer.task_filter import filter_into
    from posttrain.synthesis.knowledge_graph import KnowledgeGraphBuilder
    from posttrain.synthesis.out_dir import finished
    from posttrain.types import SamplingParams

    synthesize_tool_envs(KnowledgeGraphBuilder(0), 6, tmp_path / "kg", max_level=1)
    problems = sorted(ToolEnvTasks(tmp_path / "kg").problems.values(),
                      key=lambda p: p.reference)
    ids = [p.reference for p in problems]
    played, stop = [], {"at": ids[2]}

    def seen(task):
        played.append(task)
        if task == stop["at"]:
            raise KeyboardInterrupt

    pool = [scripted_solver("a", tokenizer, problems, solves=set(ids[:4]), seen=seen)]
    run = [pool, 2, [], False, SamplingParams(temperature=1.0, max_new_tokens=64, seed=0),
           LoopLimits(max_turns=6)]
    out = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        filter_into(out, problems, *run, batch=2)
    assert [r["task"] for r in finished(out)] == ids[:2]
    stop["at"], played[:] = None, []
    report = filter_into(out, problems, *run, batch=2)
    assert set(played) == set(ids[2:])
    assert report == filter_into(tmp_path / "whole", problems, *run, batch=2)
    assert sorted(p.parent.name for p in out.glob("*/env.json")) == ids[:4]


def test_the_filter_command_shows_its_progress(tmp_path, tiny_dir):
    """It printed nothing for minutes; now a line at the start and at the end (off a
    terminal), as synthesize tools/kg/repo do."""
    from posttrain.synthesis.knowledge_graph import KnowledgeGraphBuilder

    synthesize_tool_envs(KnowledgeGraphBuilder(0), 3, tmp_path / "kg", max_level=1)
    result = CliRunner().invoke(app, [
        "synthesize", "filter", str(tmp_path / "kg"), str(tmp_path / "kept"), "--solver",
        str(tiny_dir), "--k", "1", "--max-turns", "1", "--max-new-tokens", "2"])
    assert result.exit_code == 0, result.output
    assert "tasks: 0/3" in result.output and "tasks: 3/3" in result.output
    assert json.loads((tmp_path / "kept" / "filter_report.json").read_text())["tasks"] == 3
