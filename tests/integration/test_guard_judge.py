"""The anti-hack guard's judge from config (``agent.guard.judge``): a function named by dotted
path clears or confirms flagged calls inside the agent loop; one that fails or says neither
confirms the flag and is counted; a local chat model is asked too."""

import pytest
from agent_helpers import REWARD, TASK, ScriptedEngine

from posttrain.config import ConfigError, load_config
from posttrain.harness import ToolRegistry
from posttrain.harness.guard import BLOCKED
from posttrain.recipes.run_tasks import rollout_function
from posttrain.rollout.scoring import rollout_metrics
from posttrain.types import SamplingParams

HISTORY = '<tool_call>{"name": "shell", "arguments": {"command": "git log"}}</tool_call>'
FETCH = '<tool_call>{"name": "shell", "arguments": {"command": "curl http://x/y"}}</tool_call>'


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: The command.
    """
    return f"ran {command}"


class Task:
    reference = "5"

    def messages(self):
        return list(TASK)


def play(tokenizer, *overrides):
    cfg = load_config("configs/quickstart.yaml", ["task.name=calculator", "stages=[rl]",
                                                  *overrides])
    rollout = rollout_function(cfg, ToolRegistry([shell]), None)
    engine = ScriptedEngine(tokenizer, [HISTORY, FETCH, "<answer>5</answer>"])
    (ep,) = rollout(engine, tokenizer, [Task()], REWARD, SamplingParams(max_new_tokens=64))
    return [tokenizer.decode(p) for p in engine.prompts[1:]], ep


def test_a_function_judge_clears_one_flag_and_confirms_the_other(tokenizer):
    (after_history, after_fetch), ep = play(
        tokenizer, "agent.guard.judge.function=guard_judges:history_only")
    assert BLOCKED in after_history  # git history: the judge says hack
    assert "ran curl http://x/y" in after_fetch  # a fetch: the judge clears it, the call runs
    assert (ep.meta["guard_flags"], ep.meta["guard_blocks"]) == (2, 1)
    assert ep.meta["guard_judge_failures"] == 0 and ep.finish_reason == "answer"


@pytest.mark.parametrize("judge", ["broken", "undecided"])
def test_a_judge_that_fails_confirms_every_flag_and_is_counted(tokenizer, judge):
    (after_history, after_fetch), ep = play(
        tokenizer, f"agent.guard.judge.function=guard_judges:{judge}")
    assert BLOCKED in after_history and BLOCKED in after_fetch
    assert (ep.meta["guard_blocks"], ep.meta["guard_judge_failures"]) == (2, 2)
    assert rollout_metrics([ep], "correct")["guard_judge_failures"] == 2.0


def test_a_local_model_judges(tokenizer, tiny_dir):
    """The random tiny model answers neither yes nor no: the flag stands, counted."""
    _, ep = play(tokenizer, f"agent.guard.judge.model={tiny_dir}",
                 "agent.guard.judge.max_new_tokens=8")
    assert (ep.meta["guard_flags"], ep.meta["guard_judge_failures"]) == (2, 2)


@pytest.mark.parametrize("override,says", [
    ("agent.guard.judge.function=guard_judges:wrong_shape",
     "agent.guard.judge.function: 'guard_judges:wrong_shape' is not a guard judge"),
    ("agent.guard.judge.temperature=0.5",
     "agent.guard.judge: a guard judge (or set function) is served by exactly one of model"),
    ("agent.guard.judge.prompt=Say {question}", "prompt: fields are {call} and {flags}"),
])
def test_a_judge_that_cannot_work_is_a_config_error(override, says, tiny_dir):
    with pytest.raises(ConfigError) as err:
        load_config("configs/quickstart.yaml", [
            "task.name=calculator", "stages=[rl]", override,
            *([f"agent.guard.judge.model={tiny_dir}"] if "prompt" in override else [])])
    assert says in " ".join(str(err.value).split())
