"""verifiers environments (``task.name: verifiers``) played by the environment itself in the
Python that ``.ci/verifiers_env.sh`` builds (``.venv-verifiers``, or
``POSTTRAIN_VERIFIERS_VENV``; verifiers pins an older openai than this project's): its tasks
and splits, single- and multi-turn episodes through ``posttrain serve`` scored by its reward
functions, the runner's failures named, and a few RL steps."""

import json
import os
import re
from pathlib import Path

import pytest
from tests.integration.library_helpers import Replier, rl_steps, tiny_model

from posttrain.envs.libraries.bridge import LibraryAgent, LibraryError, LibraryTasks
from posttrain.rewards import RewardFunction
from posttrain.rollout import ExternalAgentRollout
from posttrain.types import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("POSTTRAIN_VERIFIERS_VENV", ROOT / ".venv-verifiers"))
PYTHON = str(VENV / "bin" / "python")
RUNNER = "verifiers_runner.py"
PATHS = [str(ROOT / "examples" / "verifiers")]
QUESTION = re.compile(r"What is (\d+)\+(\d+)\?")


@pytest.fixture(scope="module", autouse=True)
def verifiers_python():
    if not Path(PYTHON).exists():
        pytest.skip(f"no verifiers environment at {VENV}: build it with .ci/verifiers_env.sh")


class Solver(Replier):
    """Answers the last question of a prompt: with ``tools``, first by calling ``add`` and
    then with the tool's result; ``wrong`` adds 1 to every answer."""

    def __init__(self, model, tokenizer, tools: bool = False, wrong: bool = False) -> None:
        super().__init__(model, tokenizer)
        self.tools, self.wrong = tools, wrong

    def reply(self, prompt: str) -> str:
        a, b = map(int, QUESTION.findall(prompt)[-1])
        if self.tools and "<|im_start|>tool" not in prompt:
            return f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
        result = int(prompt.rsplit("<|im_start|>tool\n", 1)[-1].split("<", 1)[0]) \
            if self.tools else a + b
        return f"<answer>{result + self.wrong}</answer>"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model") / "model")


def spec(environment: str = "arith_env") -> dict:
    return {"id": environment, "args": {}, "agent": {}, "paths": PATHS}


@pytest.fixture(scope="module")
def tasks():
    return LibraryTasks(PYTHON, RUNNER, spec(), eval_fraction=0.1)


def test_the_environments_tasks_and_its_splits(tasks):
    assert (len(tasks.splits["train"]), len(tasks.splits["eval"])) == (200, 50)
    first = tasks.splits["train"][0]
    a, b = map(int, QUESTION.fullmatch(first.messages()[-1]["content"]).groups())
    assert first.reference == str(a + b) and first.row["answer"] == first.reference


@pytest.mark.parametrize("environment, tools, answers", [
    ("arith_env", False, ((False, 2), (True, 2))),
    pytest.param("arith_tools_env", True, ((False, 1),), marks=pytest.mark.slow)])
def test_episodes_are_scored_by_the_environments_reward_functions(tiny, tasks, environment,
                                                                  tools, answers):
    """The environment's harness plays through the served engine (with the tool, two turns);
    its weighted reward functions are the episode's reward parts, for a right and a wrong
    answer."""
    model, tokenizer = tiny
    agent = LibraryAgent(PYTHON, RUNNER, spec(environment), timeout_s=120)
    try:
        for wrong, n in answers:
            play = ExternalAgentRollout(agent, timeout_s=120)
            try:
                episodes = play(Solver(model, tokenizer, tools, wrong), tokenizer,
                                tasks.splits["eval"][:n], RewardFunction({}),
                                SamplingParams(max_new_tokens=40), group_size=2)
            finally:
                play.close()
            rewards = {"correct": float(not wrong), "format": 0.1}
            assert [e.rewards for e in episodes] == [rewards] * 2 * n, episodes[0].meta
            assert all(e.meta["calls"] == (2 if tools else 1) for e in episodes)
            answer = tokenizer.decode([t for t, m in zip(episodes[0].segments[-1].token_ids,
                                                         episodes[0].segments[-1].loss_mask)
                                       if m], skip_special_tokens=True)
            assert "<answer>" in answer
    finally:
        agent.close()


FAILING_RUNNER = """
import sys
mode = sys.argv[1]
print("verifiers could not load arith_nope", file=sys.stderr)
if mode == "tasks":
    sys.exit(3)
sys.stdin.readline()  # serve: dies on its first request
sys.exit(3)
"""


ORPHANING_RUNNER = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # holds our stdout
sys.stdin.readline()
print("the runner died; its child lives on", file=sys.stderr)
sys.exit(3)
"""


LISTING_RUNNER = """
import json
for i, split in enumerate(["eval", "train", None, None, "validation"]):
    print(json.dumps({"id": f"t{i}", "messages": [{"role": "user", "content": f"q{i}"}],
                      "answer": 0, "split": split, "row": {"i": i}}))
"""


def test_a_tasks_own_split_places_it_and_the_rest_are_hashed(tmp_path, monkeypatch):
    from posttrain.envs.libraries import bridge

    (tmp_path / "listing.py").write_text(LISTING_RUNNER)
    monkeypatch.setattr(bridge, "RUNNERS", tmp_path)
    tasks = LibraryTasks(None, "listing.py", spec(), eval_fraction=0.5)
    assert "t0" in {t.id for t in tasks.splits["eval"]}
    assert "t1" in {t.id for t in tasks.splits["train"]}
    assert sorted(t.id for s in tasks.splits.values() for t in s) == [f"t{i}" for i in range(5)]
    assert {t.reference for s in tasks.splits.values() for t in s} == {"0"}  # answer 0 kept


def test_a_runner_that_fails_is_named_with_its_words(tmp_path, monkeypatch):
    """Listing, playing (the worker dies on a request, also when a child it started holds
    its stdout) and a Python that is not there: each a LibraryError with the runner's own
    last words, nothing left waiting."""
    from posttrain.envs.libraries import bridge

    (tmp_path / "failing.py").write_text(FAILING_RUNNER)
    monkeypatch.setattr(bridge, "RUNNERS", tmp_path)
    with pytest.raises(LibraryError, match="could not list.*arith_nope"):
        LibraryTasks(None, "failing.py", spec(), eval_fraction=0.1)
    agent = LibraryAgent(None, "failing.py", spec(), timeout_s=30)
    row = {"messages": [{"role": "user", "content": "What is 1+2?"}]}
    with pytest.raises(LibraryError, match="stopped: verifiers could not load arith_nope"):
        agent("http://127.0.0.1:9/v1", "key", bridge.task_of(json.dumps(
            {"id": "a", "answer": "3", "row": row, **row}), 1)[0])
    agent.close()
    (tmp_path / "orphaning.py").write_text(ORPHANING_RUNNER)
    agent = LibraryAgent(None, "orphaning.py", spec(), timeout_s=100)
    with pytest.raises(LibraryError, match="stopped: the runner died; its child lives on"):
        agent("http://127.0.0.1:9/v1", "key", bridge.task_of(json.dumps(
            {"id": "a", "answer": "3", "row": row, **row}), 1)[0])  # not at the timeout
    agent.close()
    with pytest.raises(LibraryError, match="task.python"):
        LibraryTasks(str(tmp_path / "python"), RUNNER, spec(), eval_fraction=0.1)


@pytest.mark.slow
def test_a_few_rl_steps_train_on_the_verifiers_environment(tmp_path):
    steps = rl_steps("examples/verifiers/arith.yaml", PYTHON, tmp_path / "run")
    assert len(steps) == 2 and all("reward/format" in r for r in steps)
