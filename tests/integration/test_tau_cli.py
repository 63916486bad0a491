"""``posttrain tau check`` (the gold replay of every domain), ``posttrain tau eval`` (pass^k
tables; a scripted agent with known successes, and a random tiny model that scores 0), and
tau tasks as an RL environment through ``posttrain train``."""

import json
import math

import pytest
from agent_helpers import ScriptedEngine
from tau_helpers import gold_agent, gold_users
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.tau import summary_table
from posttrain.config import LoopLimits
from posttrain.envs.tau import gold
from posttrain.envs.tau.episode import TauScoring
from posttrain.envs.tau.rl import TauTasks
from posttrain.recipes.outer.tau_eval import play, summarize
from posttrain.types import SamplingParams

MOCK_PRISTINE = "107f83a70b7bf4f616e283b0b0b8451346fe7681173398d4498a1ec15c5fdfc6"
RETAIL_FAILING = ["2", "3", "4", "35", "37", "38", "39", "46", "47", "54", "55", "64", "67",
                  "68", "105"]  # the 15 tasks with gold calls that fail by design (18 calls)


def check(*args):
    result = CliRunner().invoke(app, ["tau", "check", *args])
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result, rows


@pytest.mark.parametrize("domain,tasks,errors", [("mock", 10, 0), ("telecom", 20, 0)])
def test_tau_check_passes_on_every_task(domain, tasks, errors):
    result, rows = check("--domain", domain)
    assert result.exit_code == 0, result.output
    assert len(rows) == tasks and all(r["reward"] == 1.0 for r in rows)
    assert sum(a["error"] for r in rows for a in r["actions"]) == errors
    for r in rows:
        assert {"task_id", "final_db_hash", "final_user_db_hash"} <= r.keys()
        assert all({"output", "error"} <= a.keys() for a in r["actions"])
    if domain == "mock":
        nl_only = next(r for r in rows if r["task_id"] == "create_task_1_nl_eval")
        assert nl_only["final_db_hash"] == MOCK_PRISTINE and nl_only["actions"] == []


@pytest.mark.slow
def test_tau_check_retail_reproduces_the_designed_gold_failures():
    result, rows = check("--domain", "retail", *[f"--task={t}" for t in RETAIL_FAILING])
    assert result.exit_code == 0, result.output
    assert [r["reward"] for r in rows] == [1.0] * 15
    assert sum(a["error"] for r in rows for a in r["actions"]) == 18
    assert all(r["final_user_db_hash"] is None for r in rows)
    bad = CliRunner().invoke(app, ["tau", "check", "--domain", "retail", "--task", "nope"])
    assert bad.exit_code == 2 and "unknown task ids" in bad.output


def test_tau_check_fails_when_a_gold_replay_misses(monkeypatch):
    # the spec: gold actions alone do not meet these two mock tasks' assertions
    monkeypatch.setitem(gold.STATE_BASIS, "mock", "ENV_ASSERTION")
    result, rows = check("--domain", "mock")
    assert result.exit_code == 1
    assert sorted(r["task_id"] for r in rows if r["reward"] != 1.0) == [
        "update_task_with_history_and_env_assertions", "update_task_with_user_tools"]


class SometimesGold:
    """The gold agent on (task, trial) pairs where ``(index + seed) % 3 != 0``; otherwise it
    keeps asking the user for more (the conversation runs out of turns)."""

    version = 0

    def __init__(self, tokenizer, index):
        self.inner = ScriptedEngine(tokenizer, gold_agent("mock"))
        self.stall = ScriptedEngine(tokenizer, ["Could you tell me more?"] * 1000)
        self.index = index

    def generate(self, prompts, sampling, seeds=None):
        outs = []
        for p in prompts:
            text = self.inner.tok.decode(p)
            task = text.split("calling about task <<")[1].split(">>")[0]
            engine = self.inner if (self.index[task] + sampling.seed) % 3 else self.stall
            outs += engine.generate([p], sampling)
        return outs


def test_pass_hat_k_of_a_scripted_agent(tokenizer):
    tasks = TauTasks("mock", gold_users("mock"), scoring=TauScoring(("DB",)))
    prompts = tasks.splits["eval"]
    index = {p.reference: i for i, p in enumerate(prompts)}
    sampling = SamplingParams(max_new_tokens=512, stop_token_ids=(tokenizer.eos_token_id,),
                              seed=0)
    limits = LoopLimits(max_turns=8, max_tokens=10**6, max_tool_errors=100, loop_repeats=100)
    episodes = list(play(SometimesGold(tokenizer, index), tokenizer, tasks, prompts, 3, limits,
                         sampling, batch=4))
    summary = summarize(episodes)
    successes = [sum((i + t) % 3 != 0 for t in range(3)) for i in range(10)]  # 2 each
    assert [sum(e.rewards["success"] for e in episodes
                if e.meta["env"]["task_id"] == p.reference) for p in prompts] == successes
    expected = {k: sum(math.comb(c, k) / math.comb(3, k) for c in successes) / 10
                for k in (1, 2, 3)}
    assert summary["pass_hat_k"] == pytest.approx(expected)
    assert expected == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0.0})
    assert summary["terminations"] == {"user_stop": 20, "max_turns": 10}
    assert (summary["tasks"], summary["episodes"], summary["avg_reward"]) == (
        10, 30, pytest.approx(2 / 3))
    assert summary["reward_basis"] == {"DB": 20}
    table = summary_table("mock", summary)
    assert [c.header for c in table.columns] == ["metric", "value"]


def test_tau_eval_of_a_random_tiny_model(tiny_dir, tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "tau", "eval", "--domain", "mock", "--model", str(tiny_dir), "--trials", "2",
        "--limit", "3", "--out", str(out), "--max-turns", "2", "--max-new-tokens", "12",
        "--temperature", "1.0"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_hat_k"] == {"1": 0.0, "2": 0.0} and summary["episodes"] == 6
    assert "pass^2" in result.output and "NL_ASSERTION is left out" in result.output
    replayed = CliRunner().invoke(app, ["replay", str(out / "episodes.jsonl"), "--model",
                                        str(tiny_dir)])
    assert replayed.exit_code == 0 and "6 of 6 episodes consistent" in replayed.output
    solo = CliRunner().invoke(app, [
        "tau", "eval", "--domain", "mock", "--model", str(tiny_dir), "--solo", "--limit", "2",
        "--out", str(tmp_path / "solo"), "--max-turns", "2", "--max-new-tokens", "12"])
    assert solo.exit_code == 0, solo.output
    assert json.loads((tmp_path / "solo" / "summary.json").read_text())["tasks"] == 2
    bad = CliRunner().invoke(app, ["tau", "eval", "--domain", "retail", "--model",
                                   str(tiny_dir), "--split", "nope"])
    assert bad.exit_code == 2 and "no split 'nope'" in bad.output


def test_rl_on_tau_tasks_through_the_cli(tiny_dir, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/tau.yaml", f"out_dir={out}", f"model.path={tiny_dir}",
        f"task.tau.user.model={tiny_dir}", "rl.steps=2", "eval.num_problems=2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows if "reward" in r][:2] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_after_rl"]["tau"] == 0.0


@pytest.mark.parametrize("overrides,message", [
    ([], "task.tau.user"),
    (["task.tau.user={model: m}", "reward.parts={correct: {verifier: exact}}",
      "reward.accuracy_part=correct"], "task.name=tau is scored by its environment"),
    (["task.tau.user={model: m}", "reward.parts.extra={verifier: env}"],
     "scores only tau, success"),
    (["task.tau.user={model: m}", "stages=[sft, rl]"], "needs sft.data"),
    (["task.tau.user={model: m, endpoint: e}"], "exactly one of model and endpoint"),
    (["task.tau.user={model: m}", "task.tau.reward_basis=[DB, SPEED]"], "reward_basis"),
    (["task.tau.user={model: m}", "task.tau.solo=true"], "solo has no user"),
])
def test_bad_tau_settings_are_refused(overrides, message):
    from posttrain.config import ConfigError, load_config

    base = ["task.name=tau", "reward.parts={tau: {verifier: env}}", "reward.accuracy_part=tau",
            "stages=[rl]"]
    with pytest.raises(ConfigError, match=message):
        load_config(None, base + overrides)
    assert load_config(None, [*base, "task.tau.solo=true"]).task.tau.solo



def judge(verdict):
    """A judge answering every expected outcome with ``verdict`` (None: not JSON at all)."""
    def chat(conversations):
        replies = []
        for conversation in conversations:
            outcomes = conversation[-1]["content"].split("Expected outcomes:\n")[1]
            n = outcomes.count("\n- ") + 1
            replies.append("I cannot tell." if verdict is None else json.dumps({"results": [
                {"expectedOutcome": "o", "reasoning": "r", "metExpectation": verdict}] * n}))
        return replies
    return chat


@pytest.mark.slow
def test_nl_assertions_through_a_judge_and_infrastructure_errors_left_out(tokenizer):
    ids = ["16", "19", "21"]  # retail tasks with NL assertions (basis DB x NL_ASSERTION)

    def evaluate(scoring):
        tasks = TauTasks("retail", gold_users("retail"), "base", "base", scoring=scoring)
        prompts = [p for p in tasks.splits["eval"] if p.reference in ids]
        assert all(p.task.evaluation_criteria.nl_assertions for p in prompts)
        sampling = SamplingParams(max_new_tokens=512, stop_token_ids=(tokenizer.eos_token_id,))
        limits = LoopLimits(max_turns=40, max_tokens=10**6, max_tool_errors=100,
                            loop_repeats=100)
        engine = ScriptedEngine(tokenizer, gold_agent("retail"))
        return summarize(list(play(engine, tokenizer, tasks, prompts, 1, limits, sampling)))

    judged = evaluate(TauScoring(judge=judge(True)))
    assert judged["reward_basis"] == {"DB x NL_ASSERTION": 3}
    assert (judged["pass_hat_k"], judged["unavailable"]) == ({1: 1.0}, [])
    assert evaluate(TauScoring(judge=judge(False)))["pass_hat_k"] == {1: 0.0}
    garbled = evaluate(TauScoring(judge=judge(None)))
    assert (garbled["infrastructure_errors"], garbled["episodes"]) == (3, 0)
    assert garbled["pass_hat_k"] == {} and garbled["avg_reward"] == 0.0
    without = evaluate(TauScoring())
    assert without["reward_basis"] == {"DB": 3} and without["unavailable"] == ["NL_ASSERTION"]
    assert without["pass_hat_k"] == {1: 1.0}
