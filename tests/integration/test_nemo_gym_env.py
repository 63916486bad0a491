"""NeMo-Gym environments (``task.name: nemo_gym``) played by NeMo-Gym's own servers in the
Python that ``.ci/nemo_gym_env.sh`` builds (``.venv-nemo-gym``, or
``POSTTRAIN_NEMO_GYM_VENV``; nemo-gym needs Python 3.12): a resources server's rows as the
tasks, single- and multi-turn episodes through ``posttrain serve`` scored by its ``/verify``
(one that nemo-gym ships, and ``examples/nemo_gym/arith_gym`` written against its API),
bad rows and missing judges named, and a few RL steps."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from tests.integration.library_helpers import Replier, rl_steps, tiny_model

from posttrain.envs.libraries.bridge import LibraryAgent, LibraryError, LibraryTasks, task_of
from posttrain.rewards import RewardFunction
from posttrain.rollout import ExternalAgentRollout
from posttrain.types import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("POSTTRAIN_NEMO_GYM_VENV", ROOT / ".venv-nemo-gym"))
PYTHON = str(VENV / "bin" / "python")
RUNNER = "nemo_gym_runner.py"
DATA = ROOT / "examples" / "nemo_gym" / "arith_gym" / "data"
QUESTION = re.compile(r"What is (\d+)\+(\d+)\?")
CITY = re.compile(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*")
CLAUDE_AGENT = """arith_gym_claude_code_agent:
  responses_api_agents:
    claude_code_agent:
      anthropic_api_key: ${anthropic_api_key}
      resources_server: {type: resources_servers, name: arith_gym}
"""
ROW = task_of(json.dumps({"id": "q", "messages": [{"role": "user", "content": "1+2?"}],
                          "row": {"responses_create_params": {"input": "1+2?"}}}), 1)[0]


@pytest.fixture(scope="module", autouse=True)
def nemo_gym_python():
    if not Path(PYTHON).exists():
        pytest.skip(f"no NeMo-Gym environment at {VENV}: build it with .ci/nemo_gym_env.sh")


def spec(environment: str = "arith_gym", **fields) -> dict:
    return {"environment": environment, "paths": [str(ROOT / "examples" / "nemo_gym")],
            "max_steps": 8, **fields}


class Solver(Replier):
    """Plays the last user turn of a prompt: an addition (with the ``add`` tool offered,
    first by calling it, then with its result) or a weather question (one ``get_weather``
    call for the city it names). ``wrong`` is off by one, or asks about Paris."""

    def __init__(self, model, tokenizer, wrong: bool = False) -> None:
        super().__init__(model, tokenizer)
        self.wrong = wrong

    def reply(self, prompt: str) -> str:
        asked = prompt.rsplit("<|im_start|>user\n", 1)[-1]
        if not QUESTION.search(asked):
            city = "Paris" if self.wrong else CITY.findall(asked)[-1]
            return f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}' \
                   "</tool_call>"
        a, b = map(int, QUESTION.findall(asked)[-1])
        result = re.search(r'"sum": ?(\d+)', asked)
        if "Tools: add" in prompt and result is None:
            return f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
        return f"<answer>{(int(result.group(1)) if result else a + b) + self.wrong}</answer>"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model") / "model")


def test_the_rows_are_the_tasks_in_their_splits():
    tasks = LibraryTasks(PYTHON, RUNNER, spec(data=[str(DATA / "train.jsonl")],
                                              eval_data=[str(DATA / "eval.jsonl")]), 0.1)
    assert (len(tasks.splits["train"]), len(tasks.splits["eval"])) == (200, 50)
    first = tasks.splits["train"][0]
    a, b = map(int, QUESTION.fullmatch(first.messages()[-1]["content"]).groups())
    assert first.reference == str(a + b) == first.row["expected_answer"]
    shipped = LibraryTasks(PYTHON, RUNNER, spec("example_tool_call_multireward"), 0.2)
    rows = [t for split in shipped.splits.values() for t in split]
    assert len(rows) == 5 and len(shipped.splits["eval"]) >= 1  # its data/example.jsonl
    assert [m["role"] for m in rows[0].messages()] == ["system", "user"]  # developer: system


def play(tiny, agent, tasks, wrong: bool):
    model, tokenizer = tiny
    rollout = ExternalAgentRollout(agent, timeout_s=120)
    try:
        return rollout(Solver(model, tokenizer, wrong), tokenizer, tasks, RewardFunction({}),
                       SamplingParams(max_new_tokens=40), group_size=2)
    finally:
        rollout.close()


@pytest.fixture(scope="module")
def arith_agent():
    """One runner for every ``arith_gym`` episode (what it plays comes with each request)."""
    agent = LibraryAgent(PYTHON, RUNNER, spec(), timeout_s=120)
    yield agent
    agent.close()


@pytest.mark.parametrize("data, calls", [
    ("eval.jsonl", 1), pytest.param("tools.jsonl", 2, marks=pytest.mark.slow)])
def test_episodes_are_scored_by_the_servers_verify(tiny, arith_agent, data, calls):
    """NeMo-Gym's simple_agent plays through the served engine (with the ``add`` tool, two
    turns); the verify response's reward components are the episode's reward parts, for a
    right and a wrong answer."""
    tasks = LibraryTasks(PYTHON, RUNNER, spec(data=[str(DATA / data)]),
                         eval_fraction=0.5).splits["eval"][:2]
    for wrong in (False, True):
        episodes = play(tiny, arith_agent, tasks, wrong)
        rewards = {"correct": float(not wrong), "format": 0.1}
        assert [e.rewards for e in episodes] == [rewards] * 2 * len(tasks), episodes[0].meta
        assert all(e.meta["calls"] == calls for e in episodes)


def test_an_environment_nemo_gym_ships_scores_its_components(tiny):
    """``example_tool_call_multireward``, one model turn (``agent_config``): the right
    city's call scores all three components, another city's misses ``correctness``."""
    the_spec = spec("example_tool_call_multireward", agent_config={"max_steps": 1})
    tasks = LibraryTasks(PYTHON, RUNNER, the_spec, eval_fraction=0.2).splits["train"][:2]
    agent = LibraryAgent(PYTHON, RUNNER, the_spec, timeout_s=120)
    try:
        for wrong in (False, True):
            episodes = play(tiny, agent, tasks, wrong)
            rewards = {"correctness": float(not wrong), "schema_valid": 1.0, "format": 1.0}
            assert [e.rewards for e in episodes] == [rewards] * 2 * len(tasks), \
                episodes[0].meta
    finally:
        agent.close()


def test_bad_rows_and_missing_judges_are_named(tmp_path):
    """A row that is not NeMo-Gym's, an environment that is not there, a config value that
    ng_run's command line would give, and a config that has the policy judge its episodes or
    names a judge the spec gives no endpoint: each a LibraryError in the runner's words."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"responses_create_params": {"input": "What is 1+2?"}}) + "\n"
                   + json.dumps({"question": "What is 1+2?"}) + "\n")
    with pytest.raises(LibraryError, match=r"bad.jsonl:2 is not a NeMo-Gym row"):
        LibraryTasks(PYTHON, RUNNER, spec(data=[str(bad)]), 0.1)
    with pytest.raises(LibraryError, match="no NeMo-Gym resources server 'arith_nope'"):
        LibraryTasks(PYTHON, RUNNER, spec("arith_nope"), 0.1)
    keyed = tmp_path / "keyed"  # a value ng_run's command line would give: named
    shutil.copytree(ROOT / "examples" / "nemo_gym" / "arith_gym", keyed / "arith_gym")
    configs = keyed / "arith_gym" / "configs" / "arith_gym.yaml"
    configs.write_text(configs.read_text().replace(
        "      domain: math", "      domain: ${the_domain}") + CLAUDE_AGENT)
    agent = LibraryAgent(PYTHON, RUNNER, spec(paths=[str(keyed)]), timeout_s=60)
    try:  # the unused claude_code_agent's own missing key does not matter
        with pytest.raises(LibraryError, match=r"needs values .*\(domain: \$\{the_domain\}\)"):
            agent("http://127.0.0.1:9/v1", "key", ROW)
    finally:
        agent.close()
    judge = {"judge_model_server": {"type": "responses_api_models", "name": "judge"}}
    for config, words in (({}, r"has the policy \(policy_model\) judge the episodes"),
                          (judge, r"calls the model servers \['judge'\] \(judges\)")):
        judged = spec("equivalence_llm_judge", config=config)
        agent = LibraryAgent(PYTHON, RUNNER, judged, timeout_s=60)
        try:
            with pytest.raises(LibraryError, match=words):
                agent("http://127.0.0.1:9/v1", "key", ROW)
        finally:
            agent.close()


@pytest.mark.slow
def test_a_few_rl_steps_train_on_the_nemo_gym_environment(tmp_path):
    steps = rl_steps("examples/nemo_gym/arith.yaml", PYTHON, tmp_path / "run")
    assert len(steps) == 2 and all("reward/format" in r for r in steps)
