"""The code environment: hidden fail-to-pass / pass-to-pass tests in the sandbox decide the
reward, the submit tool gives public feedback, submissions are capped and penalised, and every
episode has its own workspace."""

import json
import random

import pytest
from agent_helpers import ScriptedEngine

from posttrain.config import ConfigError, load_config
from posttrain.envs import CodeTasks
from posttrain.envs.code import module
from posttrain.harness import AgentLoop, ToolCall
from posttrain.harness.verifier import SubmissionPolicy
from posttrain.rewards import RewardFunction
from posttrain.types import SamplingParams

TASKS = CodeTasks(n_problems=20)
CAPPED = CodeTasks(n_problems=20, policy=SubmissionPolicy(max_submissions=2, penalty=0.25))
REWARD = RewardFunction({"correct": ("env", 1.0), "submissions": ("env", 1.0),
                         "format": ("format", 0.0)})


def problem(family_body_prefix="return x *"):
    return next(p for p in TASKS.problems.values() if p.body.startswith(family_body_prefix))


def submit_call(solution):
    return "<tool_call>" + json.dumps({"name": "submit",
                                       "arguments": {"solution": solution}}) + "</tool_call>"


def test_hidden_tests_fail_to_pass_and_pass_to_pass():
    p = problem()
    env = TASKS.make_env(p.name)
    try:
        assert env._hidden(p.stub) == {"correct": 0.0, "f2p": 0.0, "p2p": 1.0}
        assert env._hidden(p.solution) == {"correct": 1.0, "f2p": 1.0, "p2p": 1.0}
        broken = p.solution.replace("return 2 * x", "return 3 * x")
        assert env._hidden(broken) == {"correct": 0.0, "f2p": 1.0, "p2p": 0.0}
        assert env._hidden("def f(x:\n")["correct"] == 0.0  # a syntax error fails everything
        assert env._hidden(module(p.signature, "while True: pass"))["f2p"] == 0.0  # killed
    finally:
        env.close()


def test_submit_feedback_cap_and_penalty():
    p = problem()
    env = CAPPED.make_env(p.name)
    tools = env.tools
    wrong = module(p.signature, p.body + " + 1")
    results = [tools.execute_sync([ToolCall("submit", {"solution": s}, "c")])[0]
               for s in (wrong, p.solution, p.solution)]
    assert [r.error for r in results] == [False, False, True]
    assert results[0].output.startswith("submission 1/2: 0/2 public tests passed; f(")
    assert results[1].output == "submission 2/2: 2/2 public tests passed"
    assert "limit of 2 submissions" in results[2].output
    assert env.verdict("") == {"correct": 1.0, "f2p": 1.0, "p2p": 1.0, "submissions": -0.25}
    env.close()


def test_sft_traces_show_the_feedback_the_tool_gives():
    p = problem()
    conv = TASKS.sft_conversation(p, 1.0, random.Random(0))
    assert [m["role"] for m in conv] == ["user", "assistant", "tool", "assistant", "tool",
                                         "assistant"]
    wrong = json.loads(conv[1]["content"].removeprefix("<tool_call>")
                       .removesuffix("</tool_call>"))["arguments"]["solution"]
    env = TASKS.make_env(p.name)
    try:
        assert env.submissions.submit(wrong) == conv[2]["content"]
        assert env.submissions.submit(p.solution) == conv[4]["content"]
    finally:
        env.close()


def test_agent_loop_gives_each_episode_its_own_sandbox_and_scores_hidden_tests(tokenizer):
    p = problem()
    probe = ('<tool_call>{"name": "run_python", "arguments": {"code": '
             '"import os; open(\'mine.txt\', \'w\').write(\'x\'); print(sorted(os.listdir()))"}}'
             "</tool_call>")
    wrong = module(p.signature, p.body + " + 1")
    replies = [probe, probe, submit_call(wrong), submit_call(p.solution), "Submitted.",
               "Submitted."]  # lockstep: one reply per episode a round
    engine = ScriptedEngine(tokenizer, replies)
    loop = AgentLoop(engine, tokenizer, TASKS.tools, env_factory=TASKS.make_env)
    eps = loop.run_many([(p.messages(), p.reference, "g")] * 2,
                        SamplingParams(max_new_tokens=256), REWARD)
    for ep in eps:  # each saw only its own file: no shared workspace
        assert ep.meta["tool_records"][0]["results"][0].endswith(
            "['mine.txt', 'solution.py', 'tests_public.json']")
    assert eps[0].rewards == {"correct": 0.0, "submissions": 0.0, "format": 0.0}
    assert eps[1].rewards == {"correct": 1.0, "submissions": 0.0, "format": 0.0}
    assert "public tests passed" in tokenizer.decode(engine.prompts[-1])


@pytest.mark.parametrize("overrides,message", [
    (["task.name=code"], "verifier env"),
    (["reward.parts.correct.verifier=env"], "verifier env"),
    (["task.name=code", "reward.parts.correct.verifier=env", "algo.adv_estimator=tree_grpo",
      "agent.tree.branches=1", "rl.group_size=8"], "cannot branch code episodes"),
    (["task.name=code", "reward.parts.correct.verifier=env",
      "task.submissions.max_submissions=0"], "max_submissions >= 1"),
])
def test_config_ties_env_rewards_to_the_code_task(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_unknown_env_part_is_a_clear_error():
    with pytest.raises(KeyError, match="the environment gives only correct"):
        RewardFunction({"style": ("env", 1.0)})("", "", {"correct": 1.0})


def test_guard_blocks_reading_hidden_tests_and_metrics_count_it(tokenizer):
    from posttrain.harness import Guard
    from posttrain.rollout import rollout_metrics
    from posttrain.rollout.agent import AgentRollout

    p = problem()
    peek = ('<tool_call>{"name": "run_python", "arguments": {"code": '
            '"print(open(\'hidden_tests.json\').read())"}}</tool_call>')
    engine = ScriptedEngine(tokenizer, [peek, "Submitted."])
    roll = AgentRollout(TASKS.tools, env_factory=TASKS.make_env, guard=Guard())
    (ep,) = roll(engine, tokenizer, [p], REWARD, SamplingParams(max_new_tokens=128))
    assert ep.meta["guard_blocks"] == 1
    assert ep.meta["tool_records"][0]["results"] == ["[blocked: this action is not allowed in "
                                                     "this environment]"]
    assert rollout_metrics([ep], "correct")["guard_blocks"] == 1.0


@pytest.mark.parametrize("solution", [
    "def f(x):\n    return '\ud800'\n",  # a lone surrogate: the file cannot even be written
    "import atexit\natexit.register(lambda: print('[]'))\n",  # forges an empty result line
    "print('5')\n",  # a result line of the wrong shape
])
def test_hostile_submissions_fail_their_tests_and_never_crash(solution):
    env = TASKS.make_env(problem().name)
    try:
        feedback = env.submissions.submit(solution)
        assert feedback.startswith("submission 1/3: 0/2 public tests passed")
        assert env.verdict("") == {"correct": 0.0, "f2p": 0.0, "p2p": 0.0, "submissions": 0.0}
    finally:
        env.close()


def test_tests_run_the_submitted_module_alone():
    p = problem()
    env = TASKS.make_env(p.name)
    try:  # a package written through run_python would shadow solution.py in the workspace
        plant = ("import os; os.mkdir('solution'); open('solution/__init__.py', 'w')"
                 f".write({p.solution!r})")
        (ran,) = env.tools.execute_sync([ToolCall("run_python", {"code": plant}, "c")])
        assert ran.outcome == "ok" and ran.output.startswith("exit code 0")
        env.submissions.submit("garbage(((")
        assert env.verdict("")["correct"] == 0.0
        both = env.tools.execute_sync([ToolCall("submit", {"solution": s}, f"c{i}")
                                       for i, s in enumerate((p.stub, p.solution))])
        assert [r.output.split(": ", 1)[1] for r in both] == [
            feedback_of(p, p.stub), "2/2 public tests passed"]  # no race between the two
    finally:
        env.close()


def feedback_of(p, solution):
    env = TASKS.make_env(p.name)
    try:
        return env._public(solution)
    finally:
        env.close()
