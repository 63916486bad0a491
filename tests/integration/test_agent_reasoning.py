"""Reasoning retention (``agent.retain_reasoning``): when a new user turn arrives, an earlier
turn's reasoning is in the prompt tokens of the next turn under ``keep_all``, and gone under
``drop_on_new_user`` (the episode continues in a new segment whose tokens are still the
conversation's rendering); ``auto_v4`` keeps it once the episode has called tools. Through the
agent loop, through the config's rollout function, and in a tau-bench conversation."""

import pytest
from agent_helpers import CALL, REWARD, TASK, ScriptedEngine, add

from posttrain.config import load_config
from posttrain.harness import AgentLoop, ToolRegistry, episode_problems
from posttrain.types import SamplingParams

SAMPLING = SamplingParams(max_new_tokens=64)
FIRST = "<think>plan A</think>Which number?"


class Customer:
    """A ``ConversationEnv`` whose user answers every message once with ``"Make it 5."`` and
    then ends the conversation."""

    tools = ToolRegistry([add])

    def __init__(self, reference=None):
        self.replies = ["Make it 5."]

    def opening(self):
        return []

    def reply(self, text):
        return (self.replies.pop(0), None) if self.replies else (None, "user_stop")

    def calls_text(self, text):
        pass

    def stop_reason(self):
        return None

    def info(self):
        return {}

    def verdict(self, final):
        return {}

    def close(self):
        pass


def play(tokenizer, mode, replies):
    engine = ScriptedEngine(tokenizer, replies)
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]), env_factory=Customer,
                     retain_reasoning=mode)
    return engine, loop.run(TASK, SAMPLING, REWARD, "5")


@pytest.mark.parametrize("mode,replies,kept", [
    ("keep_all", [FIRST, "<answer>5</answer>"], True),
    ("drop_on_new_user", [FIRST, "<answer>5</answer>"], False),
    ("auto_v4", [FIRST, "<answer>5</answer>"], False),
    ("auto_v4", [CALL, FIRST, "<answer>5</answer>"], True),
    ("drop_on_new_user", [CALL, FIRST, "<answer>5</answer>"], False),
])
def test_earlier_reasoning_is_in_the_next_prompt_as_the_mode_says(tokenizer, mode, replies,
                                                                   kept):
    engine, ep = play(tokenizer, mode, replies)
    after_user = tokenizer.decode(engine.prompts[-1])
    assert "Make it 5." in after_user and ("plan A" in after_user) == kept
    assert "Which number?" in after_user  # the message itself stays
    assert ep.finish_reason == "user_stop" and ep.meta["reasoning_drops"] == (not kept)
    assert len(ep.segments) == (1 if kept else 2)
    # the sampled reasoning stays trained where it was sampled, and every segment's tokens
    # decode to its own conversation
    first = ep.segments[0]
    trained = tokenizer.decode([t for t, m in zip(first.token_ids, first.loss_mask) if m])
    assert "plan A" in trained
    assert episode_problems(ep, tokenizer) == []
    for prompt in engine.prompts:  # each prompt is a prefix of its segment's record
        assert any(seg.token_ids[: len(prompt)] == prompt for seg in ep.segments)


def test_the_config_knob_reaches_the_rollout(tokenizer):
    from posttrain.recipes.run_tasks import rollout_function

    for mode, kept in (("keep_all", True), ("drop_on_new_user", False)):
        cfg = load_config("configs/quickstart.yaml", [
            "task.name=calculator", "stages=[rl]", f"agent.retain_reasoning={mode}"])
        rollout = rollout_function(cfg, ToolRegistry([add]), Customer)
        engine = ScriptedEngine(tokenizer, [FIRST, "<answer>5</answer>"])

        class Task:
            reference = "5"

            def messages(self):
                return list(TASK)

        (ep,) = rollout(engine, tokenizer, [Task()], REWARD, SAMPLING)
        assert ("plan A" in tokenizer.decode(engine.prompts[-1])) == kept


def test_a_tau_conversation_drops_the_agents_reasoning_when_the_user_answers(tokenizer):
    from posttrain.config import LoopLimits
    from posttrain.envs.tau.episode import TauScoring
    from posttrain.envs.tau.rl import TauTasks
    from posttrain.envs.tau.user import user_message
    from posttrain.recipes.outer.tau_eval import play

    class User:
        def __init__(self):
            self.lines = ["Hi, I need help.", "I am Ann.", "###STOP###"]

        def respond(self, view):
            return user_message(self.lines.pop(0), None, "u")

    tasks = TauTasks("mock", lambda task, tools: User(), "base", "base",
                     scoring=TauScoring(("DB",)))
    prompt = tasks.splits["eval"][:1]
    for mode, kept in (("keep_all", True), ("drop_on_new_user", False)):
        engine = ScriptedEngine(tokenizer, ["<think>SECRET</think>Your name?", "Thanks."])
        (ep,) = play(engine, tokenizer, tasks, prompt, 1, LoopLimits(max_tokens=10**5),
                     SAMPLING, retain_reasoning=mode)
        second = tokenizer.decode(engine.prompts[1])
        assert "I am Ann." in second and ("SECRET" in second) == kept
        assert ep.finish_reason == "user_stop" and len(ep.segments) == (1 if kept else 2)
        assert episode_problems(ep, tokenizer) == []


def test_tau_eval_refuses_an_unknown_retention_mode(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.app import app

    result = CliRunner().invoke(app, ["tau", "eval", "--domain", "mock", "--model",
                                      str(tmp_path), "--retain-reasoning", "forget"])
    assert result.exit_code == 2 and "--retain-reasoning: 'forget'" in result.output
