"""The task builder as a policy (``task.name: task_builder``): a built problem is valid when
its answer is right (by the checker, or by pass@k > 0 of the solvers without one), and its
difficulty is ``1 - p`` for a solver pass rate ``0 < p < 1``; hand-scripted builder and solver
replies give hand-counted parts, and a tiny run trains on them."""

import json
import re

import pytest
from tests.integration.agent_helpers import ScriptedEngine, no_carry
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.envs.arithmetic import Problem
from posttrain.rewards import RewardFunction
from posttrain.rollout import rollout
from posttrain.synthesis.task_builder import (
    BuildPrompt,
    BuiltScorer,
    built_rows,
    check_arithmetic,
    learnability,
)
from posttrain.types import Episode, SamplingParams, Segment

REWARD = RewardFunction({"valid": ("env", 1.0), "difficulty": ("env", 1.0)})
EXAMPLES = (Problem(12, "+", 34, 2), Problem(50, "+", 7, 2))


def test_learnability_and_the_arithmetic_check_by_hand():
    assert learnability(True, 0.25) == 0.75 and learnability(True, 0.875) == 0.125
    assert learnability(True, 0.0) == 0.0 and learnability(True, 1.0) == 0.0
    assert learnability(False, 0.5) == 0.0
    assert check_arithmetic("What is 47+38?", "<think>7+8=15 4+3+1=8</think><answer>85</answer>")
    assert not check_arithmetic("What is 47+38?", "<answer>75</answer>")
    assert not check_arithmetic("What is 47/38?", "<answer>1</answer>")
    assert check_arithmetic("What is 9*12?", "<answer>108</answer>")


def scripted(builds: list[str]) -> ScriptedEngine:
    """Builder turns from ``builds`` in order; a solver that carries on one sample in four of
    each problem (else it adds without carrying)."""
    solved: dict[str, int] = {}

    def reply(prompt: str) -> str:
        if "Write a new arithmetic problem" in prompt:
            return builds.pop(0)
        a, b = map(int, re.findall(r"What is (\d+)\+(\d+)\?", prompt)[-1])
        n = solved[f"{a}+{b}"] = solved.get(f"{a}+{b}", -1) + 1
        return f"<answer>{a + b if n % 4 == 0 else no_carry(a, b)}</answer>"

    return ScriptedEngine(None, reply)


BUILDS = ["<problem>What is 47+38?</problem><think>7+8=15 4+3+1=8</think><answer>85</answer>",
          "<problem>What is 21+34?</problem><answer>55</answer>",  # no carry: always solved
          "<problem>What is 47+38?</problem><answer>75</answer>",  # the no-carry student's
          "<problem>What is 12 + 034?</problem><answer>46</answer>",  # an example, restated
          "I cannot think of one.",
          "<problem>What is 47+38?</problem><answer>999</answer>"]


@pytest.mark.parametrize(("checker", "expected"), [
    ("arithmetic", [(1, 0.75, None), (1, 0.0, None), (0, 0.0, "wrong answer"),
                    (0, 0.0, "copied an example"), (0, 0.0, "no <problem>"),
                    (0, 0.0, "wrong answer")]),
    # without a checker the solvers decide: the no-carry answer is reproduced by the
    # no-carry samples (a shared bug passes), 999 by none
    (None, [(1, 0.75, None), (1, 0.0, None), (1, 0.25, None), (0, 0.0, "copied an example"),
            (0, 0.0, "no <problem>"), (0, 0.0, "no solver reproduced the answer")]),
])
def test_parts_are_the_hand_counts(tokenizer, checker, expected):
    engine = scripted(list(BUILDS))
    engine.tok = tokenizer
    score = BuiltScorer(check_arithmetic if checker else None, 4, 1.0, 16)
    tasks = [BuildPrompt(EXAMPLES)] * len(BUILDS)
    episodes = rollout(engine, tokenizer, tasks, REWARD, SamplingParams(seed=3), 1, "s:",
                       env_score=score)
    got = [(e.rewards["valid"], e.rewards["difficulty"], e.meta["built"]["reason"])
           for e in episodes]
    assert got == expected
    assert [e.reward for e in episodes] == [v + d for v, d, _ in expected]
    solver_calls = sum("Write a new" not in tokenizer.decode(p) for p in engine.prompts)
    assert solver_calls == 4 * sum(r is None or r.startswith("no solver") for _, _, r in expected)


def test_a_fixed_solver_answers_instead_of_the_policy(tokenizer):
    builder = ScriptedEngine(tokenizer, list(BUILDS[:1]))  # fails if asked to solve
    solver = scripted([])
    solver.tok = tokenizer
    score = BuiltScorer(check_arithmetic, 4, 1.0, 16, (solver, tokenizer))
    [e] = rollout(builder, tokenizer, [BuildPrompt(EXAMPLES)], REWARD, SamplingParams(seed=3),
                  1, "s:", env_score=score)
    assert (e.rewards, len(builder.prompts), len(solver.prompts)) == (
        {"valid": 1.0, "difficulty": 0.75}, 1, 4)


@pytest.mark.parametrize(("overrides", "error"), [
    (["rl.mode=async"], "rl.mode=sync"),
    (["task.checker=sum"], "arithmetic, null or a dotted path"),
    (["task.solver=no/such/model"], "not a model directory"),
    (["algo.adv_estimator=remax"], "would bypass"),
    (["reward.parts={correct: {verifier: numeric}}", "reward.accuracy_part=correct"],
     "verifier env"),
])
def test_builder_runs_that_cannot_work_are_refused(overrides, error):
    with pytest.raises(ConfigError, match=error):
        load_config("examples/synthesis/task_builder.yaml", overrides)


def test_a_tiny_builder_run_logs_its_parts_and_records_what_it_built(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "examples/synthesis/task_builder.yaml", "model.preset=nano", "threads=1",
        "sft.steps=2", "sft.batch_size=4", "rl.steps=2", "rl.prompts_per_step=2",
        "rl.group_size=2", "task.solver_samples=2", "eval.num_problems=2", f"out_dir={out}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert any("reward/valid" in r and "reward/difficulty" in r for r in rows)
    built = [json.loads(line)["meta"]["built"] for line in open(out / "episodes.jsonl")]
    assert len(built) == 8 and all(set(b) == {"problem", "answer", "valid", "reason",
                                              "pass_rate"} for b in built)
    collected = CliRunner().invoke(app, ["synthesize", "built", str(out / "episodes.jsonl"),
                                         str(tmp_path / "built.jsonl")])
    if collected.exit_code == 0:
        report = json.loads(collected.output)
        assert report["kept"] + sum(report["left_out"].values()) == 8
    else:  # a nano builder may build nothing learnable: said with the counts, nothing written
        assert collected.exit_code == 2, collected.output
        assert "none of its 8 episodes is a learnable problem" in " ".join(
            collected.output.split())
        assert not (tmp_path / "built.jsonl").exists()


def test_collected_rows_train_a_solver_as_a_dataset(tmp_path):
    """What ``synthesize built`` writes is a prompt dataset with the default columns."""
    path = tmp_path / "built.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"What is {a}+7?", "answer": str(a + 7),
                                        "pass_rate": 0.5}) + "\n" for a in range(10)))
    cfg = load_config(None, ["stages=[rl]", "task.name=dataset", f"task.data.path={path}",
                             "task.eval_fraction=0.2"])
    tasks = cfg.task.build(0, models=None).tasks
    [task] = tasks.eval_set(1)
    assert task.messages()[-1]["content"].startswith("What is ") and task.reference.isdigit()


def test_nothing_to_collect_is_an_error_that_writes_nothing(tmp_path):
    """An empty file, or episodes of no builder, exited 0 with an empty file, which a later
    call called "not empty"; a 0-byte file left behind holds nothing, a file of rows is
    replaced only with --overwrite."""
    from posttrain.types.jsonl import write_episodes

    episodes, out = tmp_path / "episodes.jsonl", tmp_path / "built.jsonl"
    episodes.write_text("")

    def collect(*extra):
        result = CliRunner().invoke(app, ["synthesize", "built", str(episodes), str(out),
                                          *extra])
        return result.exit_code, " ".join(result.output.split())

    said = f"error: nothing to collect from {episodes}: it holds no episodes; {out} is not written"
    assert collect() == (2, said)
    assert not out.exists()
    segment = Segment([1, 2], [0, 1], [0.0, -1.0], [0, 0])
    write_episodes(episodes, [Episode([segment])])
    code, text = collect()
    said = "none of its 1 episodes is a learnable problem (left out: 1 not a builder episode)"
    assert code == 2 and said in text and not out.exists()
    out.write_text("")
    built = {"problem": "What is 1+0?", "answer": "1", "valid": True, "reason": None,
             "pass_rate": 0.5}
    write_episodes(episodes, [Episode([segment], meta={"built": built})])
    assert collect()[0] == 0 and json.loads(out.read_text())["prompt"] == "What is 1+0?"
    code, text = collect()
    assert code == 2 and "is not empty: --overwrite replaces it" in text
    assert collect("--overwrite")[0] == 0


def test_collected_rows_are_the_learnable_problems_once():
    def ep(problem, reason=None, rate=0.5, built=True):
        meta = {"built": {"problem": problem, "answer": "1", "valid": reason is None,
                          "reason": reason, "pass_rate": rate}} if built else {}
        return Episode([Segment([1, 2], [0, 1], [0.0, -1.0], [0, 0])], meta=meta)

    rows, left = built_rows([ep("What is 1+0?"), ep("What is 1+0?", rate=0.25),
                             ep("What is 0+1?", rate=1.0), ep("What is 5+5?", rate=0.0),
                             ep(None, "no <problem>", None),
                             ep("What is 9+9?", "wrong answer", None), ep(None, built=False)])
    assert rows == [{"prompt": "What is 1+0?", "answer": "1", "pass_rate": 0.5}]
    assert left == {"a repeat": 1, "solved by every solver sample": 1,
                    "solved by no solver sample": 1, "no <problem>": 1,
                    "wrong answer": 1, "not a builder episode": 1}
