"""The actor as a generative reward model (``rl.actor_as_grm``, ALGORITHMS.md §14): grading
prompts built from a step's own episodes, as many right as wrong, graded by the policy and
rewarded by agreement with the verifiable outcome; the evaluation's grading accuracy; the
policy as the ``genrm`` judge of a reward part; SFT conversations that teach the grade's form."""

import json
import re

import pytest
from agent_helpers import ScriptedEngine
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.recipes.run_tasks import RunTasks
from posttrain.rollout import JudgedRollout, rollout, rollout_metrics
from posttrain.features.actor_as_grm.grading import GradingAccuracy, GradingRollout
from posttrain.types import SamplingParams

GRADE = "You grade answers"


def answering(tasks, right, grade="<score>10</score>"):
    """Replies: the right sum to the tasks whose index is in ``right``, -1 to the others;
    ``grade(prompt)`` (or that text) to grading prompts."""
    def reply(prompt):
        if GRADE in prompt:
            return grade(prompt) if callable(grade) else grade
        k = next(i for i, t in enumerate(tasks) if t.messages()[0]["content"] in prompt)
        return f"<answer>{tasks[k].reference if k in right else -1}</answer>"
    return reply


def graded(tokenizer, right, grade="<score>10</score>", share=0.5, n_tasks=4, group_size=2):
    cfg = load_config("configs/quickstart.yaml", [f"rl.actor_as_grm={{share: {share}}}"])
    run = RunTasks(cfg)
    tasks = run.eval_tasks[:n_tasks]
    wrapped = GradingRollout(rollout, cfg.rl.actor_as_grm, "correct", cfg.seed)
    engine = ScriptedEngine(tokenizer, answering(tasks, right, grade))
    episodes = wrapped(engine, tokenizer, tasks, run.reward_fn,
                       SamplingParams(max_new_tokens=16, seed=0), group_size, group_prefix="0-")
    return [e for e in episodes if not e.meta.get("grading")], \
        [e for e in episodes if e.meta.get("grading")]


def test_grading_prompts_are_balanced_and_rewarded_by_agreement(tokenizer):
    task_eps, gradings = graded(tokenizer, right={0}, share=0.5)  # 2 right, 6 wrong episodes
    assert len(task_eps) == 8 and len(gradings) == 2 * 2  # round(0.5 * 4) prompts x group 2
    rewards = sorted(e.reward for e in gradings)
    assert rewards == [0.0, 0.0, 1.0, 1.0]  # grade 10: agrees with the right one only
    assert {e.group_id for e in gradings} == {"0-grading-0", "0-grading-1"}
    assert all(e.rewards == {"grading": e.reward} and e.meta["grade"] == 1.0 for e in gradings)
    assert all(set(e.rewards) == {"correct", "format"} for e in task_eps)


def test_a_constant_grade_earns_one_half_on_the_balanced_prompts(tokenizer):
    for grade in ("<score>0</score>", "<score>10</score>", "<score>4</score>"):
        _, gradings = graded(tokenizer, right={0, 1}, grade=grade, share=1.0)
        assert sum(e.reward for e in gradings) / len(gradings) == 0.5


def test_an_unbalanced_step_gives_as_many_right_as_wrong_prompts(tokenizer):
    """6 right and 2 wrong episodes, 4 prompts asked: 2 of each (not 3 right and 1 wrong), so
    a constant 10 earns 1/2."""
    _, gradings = graded(tokenizer, right={0, 1, 2}, share=1.0, n_tasks=4)
    assert len(gradings) == 4 * 2 and sum(e.reward for e in gradings) / len(gradings) == 0.5


def test_a_grade_that_does_not_parse_earns_zero_and_is_counted(tokenizer):
    task_eps, gradings = graded(tokenizer, right={0}, grade="it is fine")
    assert all(e.reward == 0.0 and e.meta["grade"] is None for e in gradings)
    metrics = rollout_metrics(task_eps + gradings, "correct")
    assert metrics["grading/missing"] == 1.0 and metrics["grading/reward"] == 0.0
    assert metrics["accuracy"] == pytest.approx(2 / 8)  # the task's episodes alone


def test_one_outcome_only_still_makes_grading_prompts(tokenizer):
    _, gradings = graded(tokenizer, right=set(), share=0.5)
    assert len(gradings) == 4 and all(e.reward == 0.0 for e in gradings)  # 10 on wrong ones


def test_the_evaluation_reports_grading_accuracy_balanced_and_missing(tokenizer):
    cfg = load_config("configs/quickstart.yaml", ["rl.actor_as_grm={}"])
    run = RunTasks(cfg)
    tasks = run.eval_tasks[:4]

    def grade(prompt):  # right about the first task, says 10 to everything else
        return "<score>0</score>" if "-1" in prompt and tasks[1].messages()[0]["content"] \
            in prompt else "<score>10</score>"

    engine = ScriptedEngine(tokenizer, answering(tasks, {0}, grade))
    episodes = rollout(engine, tokenizer, tasks, run.reward_fn, SamplingParams(seed=0), 1)
    result = GradingAccuracy(cfg.rl.actor_as_grm, "correct", tokenizer, tasks, engine)(episodes)
    # right: task 0 graded 10 (agrees); wrong: task 1 graded 0 (agrees), tasks 2-3 graded 10
    assert result == {"grading_accuracy": 0.5, "grading_balanced_accuracy": (1 + 1 / 3) / 2,
                      "grading_missing": 0.0}


def test_the_policy_judges_a_reward_part_on_the_rollouts_engine(tokenizer):
    cfg = load_config("configs/quickstart.yaml", [
        "reward.parts.q={verifier: judge, weight: 0.5}", "reward.judges.q={kind: policy}"])
    run = RunTasks(cfg)
    run.attach_judges(tokenizer)
    assert isinstance(run.rollout_fn, JudgedRollout)
    tasks = run.eval_tasks[:2]
    engine = ScriptedEngine(tokenizer, answering(tasks, {0}, "<score>7</score>"))
    episodes = run.rollout_fn(engine, tokenizer, tasks, run.reward_fn,
                              SamplingParams(max_new_tokens=16, seed=0), 1)
    assert [e.rewards["q"] for e in episodes] == [0.7, 0.7]
    assert sum(GRADE in tokenizer.decode(p) for p in engine.prompts) == 2


def test_sft_gradings_teach_the_grades_form_at_random(tokenizer):
    cfg = load_config("configs/quickstart.yaml", ["rl.actor_as_grm={}", "sft.gradings=0.5",
                                                  "sft.num_examples=400"])
    data = RunTasks(cfg).conversations(None, 400, 0.5, "SFT", sft=True)
    grading = [c for c in data.conversations if GRADE in c[0]["content"]]
    assert 160 < len(grading) < 240
    grades = {c[-1]["content"] for c in grading}
    assert grades == {"<score>0</score>", "<score>10</score>"}
    assert all(re.search(r"Question:\nWhat is \d+\+\d+\?", c[1]["content"]) for c in grading)


@pytest.mark.parametrize("overrides,message", [
    (["task.name=calculator"], "is an agent task"),
    (["rl.mode=async"], "use rl.mode=sync"),
    (["reward.accuracy_part=q", "reward.parts.q={verifier: judge}",
      "reward.judges.q={kind: policy}"], "must be a verifiable part"),
    (["algo.adv_estimator=gdpo"], "grading episodes do not have"),
    (["reward.shaping=[{name: dapo_overlong, max_length: 32, cache_length: 8}]"],
     "reshape the grades"),
    (["algo.dynamic_sampling.enabled=true"], "use mode drop"),
    (["algo.adv_estimator=remax"], "needs each prompt's greedy decode"),
])
def test_gradings_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", ["rl.actor_as_grm={}", *overrides])


@pytest.mark.parametrize("overrides,message", [
    (["sft.gradings=0.2"], "set rl.actor_as_grm"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={kind: policy, n_samples: 2}"],
     "needs temperature > 0"),
])
def test_grading_options_without_their_switch_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


def test_a_run_logs_the_gradings_and_the_evaluations_grading_accuracy(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "sft.steps=20",
        "sft.gradings=0.3", "rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=4",
        "rl.eval_every=2", "eval.num_problems=8", "rl.actor_as_grm={share: 0.5}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if r.get("stage") == "rl" and "grading/reward" in r]
    assert len(steps) == 2 and all(0 <= r["grading/reward"] <= 1 for r in steps)
    summary = json.loads((out / "summary.json").read_text())
    for stage in ("grading_before_rl", "eval_after_rl"):
        assert 0 <= summary[stage]["grading_accuracy"] <= 1
