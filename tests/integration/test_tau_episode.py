"""tau-bench conversations through the live agent loop (TAU_ENV.md §7): a scripted agent and
user replaying the gold actions earn reward 1 on the state basis in every domain; a random
tiny model scores 0 without crashing and its episodes' tokens and masks are consistent; the
step, error and stop rules end conversations with their termination reasons; the agent never
sees the user's tool calls."""

import json

import pytest
from agent_helpers import ScriptedEngine
from tau_helpers import gold_actions, gold_agent, gold_users

from posttrain.config import LoopLimits
from posttrain.engines import TorchEngine
from posttrain.envs.tau.episode import TauLimits, TauScoring
from posttrain.envs.tau.rl import TauTasks
from posttrain.envs.tau.user import user_message
from posttrain.harness import episode_problems, format_tool_call
from posttrain.recipes.outer.tau_eval import TAU_REWARD, summarize
from posttrain.rollout.agent import AgentRollout
from posttrain.types import SamplingParams, read_episodes, write_episodes

BASIS = {"mock": ("DB",), "retail": ("DB",), "telecom": ("ENV_ASSERTION",)}
# retail: the tasks whose gold calls fail by design, the last-variant-price task, and others
RETAIL = ["0", "1", "2", "5", "14", "20", "24", "37", "50", "64", "79", "88", "105", "113"]
LOOSE = LoopLimits(max_turns=80, max_tokens=10**6, max_tool_errors=100, loop_repeats=100)


def play(tokenizer, domain, engine, users, ids=None, limits=LOOSE,
         tau_limits=TauLimits(), max_new_tokens=512, temperature=0.0):
    tasks = TauTasks(domain, users, "base", "base", tau_limits, TauScoring(BASIS[domain]))
    prompts = [p for p in tasks.splits["eval"] if ids is None or p.reference in ids]
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              stop_token_ids=(tokenizer.eos_token_id,), seed=1)
    rollout = AgentRollout(None, limits, env_factory=tasks.make_env)
    return rollout(engine, tokenizer, prompts, TAU_REWARD, sampling)


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["mock", "telecom", "retail"])
def test_gold_replay_through_the_live_loop_earns_reward_one(tokenizer, domain):
    engine = ScriptedEngine(tokenizer, gold_agent(domain))
    episodes = play(tokenizer, domain, engine, gold_users(domain),
                    RETAIL if domain == "retail" else None)
    assert len(episodes) == (len(RETAIL) if domain == "retail" else {"mock": 10,
                                                                     "telecom": 20}[domain])
    gold = gold_actions(domain)
    for e in episodes:
        info = e.meta["env"]
        assert e.rewards == {"tau": 1.0, "success": 1.0}, (info["task_id"], info["components"])
        assert (e.finish_reason, info["termination"]) == ("user_stop", "user_stop")
        assert info["basis"] == list(BASIS[domain]) and info["infrastructure_error"] is None
        trajectory, requested = info["trajectory"], gold[info["task_id"]]
        calls = {r: sum(len(m["tool_calls"]) for m in trajectory
                        if m["role"] == r and m.get("tool_calls")) for r in ("assistant", "user")}
        assert calls["user"] == sum(a.requestor == "user" for a in requested)
        # the agent's context holds the results of its own calls only (history included)
        own = sum(m["role"] == "tool" and m.get("requestor", "assistant") == "assistant"
                  for m in trajectory)
        assert sum(m["role"] == "tool" for m in e.meta["messages"]) == own >= calls["assistant"]
        assert episode_problems(e, tokenizer) == []


def test_a_random_tiny_model_scores_zero_and_its_episodes_are_consistent(
        tiny_dir, model, tokenizer, tmp_path):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    user = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)  # a second one
    from posttrain.engines.chat import engine_tool_chat
    from posttrain.envs.tau.rl import llm_users

    users = llm_users(engine_tool_chat(user, tokenizer, max_new_tokens=24, temperature=1.0))
    limits = LoopLimits(max_turns=3, max_tokens=2048)
    episodes = play(tokenizer, "mock", engine, users, limits=limits, max_new_tokens=24,
                    temperature=1.0)
    assert len(episodes) == 10
    for e in episodes:
        assert e.rewards == {"tau": 0.0, "success": 0.0}
        seg = e.segments[0]
        assert sum(seg.loss_mask) > 0 and episode_problems(e, tokenizer) == []
        trained = [t for t, m in zip(seg.token_ids, seg.loss_mask) if m]
        user_texts = [m["content"] for m in e.meta["env"]["trajectory"]
                      if m["role"] == "user" and m["content"]]
        assert user_texts and all(text not in tokenizer.decode(trained) for text in user_texts
                                  if len(text) > 8)
    write_episodes(tmp_path / "e.jsonl", episodes)
    back = list(read_episodes(tmp_path / "e.jsonl"))
    assert [b.meta["env"]["trajectory"] for b in back] == [
        json.loads(json.dumps(e.meta["env"]["trajectory"])) for e in episodes]


class SayingUser:
    def __init__(self, text):
        self.text = text

    def respond(self, view):
        return user_message(self.text, None, "u")


def test_conversations_end_by_the_protocols_rules(tokenizer):
    bad_call = '<tool_call>{"name": "update_task_status", "arguments": {"task_id": "x", ' \
               '"status": "completed"}}</tool_call>'

    def ended(replies, user_text="Go on.", tau_limits=TauLimits()):
        engine = ScriptedEngine(tokenizer, lambda prompt: replies)
        (e,) = play(tokenizer, "mock", engine, lambda task, tools: SayingUser(user_text),
                    ["create_task_1"], tau_limits=tau_limits)
        return e.finish_reason, e.meta["env"]

    reason, info = ended(bad_call)
    assert reason == "too_many_errors" and sum(
        m.get("error", False) for m in info["trajectory"]) == 10
    reason, info = ended(bad_call, tau_limits=TauLimits(max_errors=3))
    assert reason == "too_many_errors" and sum(
        m.get("error", False) for m in info["trajectory"]) == 3
    # the greeting (not a step), then user, agent, user, agent, user, agent: 6 steps
    reason, info = ended("Could you say more?", tau_limits=TauLimits(max_steps=6))
    assert reason == "max_steps" and len(info["trajectory"]) == 7
    assert ended("Goodbye. ###STOP###")[0] == "agent_stop"
    reason, info = ended("Anything else?", user_text="No, thanks. ###STOP###")
    assert reason == "user_stop" and info["trajectory"][-1]["content"].endswith("###STOP###")
    assert info["trajectory"][:2] == [
        {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None},
        {"role": "user", "content": "No, thanks. ###STOP###", "tool_calls": None}]


def solo_gold(actions):
    """The agent of one solo task: every gold action (the user's too) in turn, then done."""
    calls = [format_tool_call(a.name, a.arguments) for a in actions]
    calls.append(format_tool_call("done", {}))

    def reply(prompt):
        return calls[prompt.count("<|im_start|>tool")]

    return reply


@pytest.mark.parametrize("domain", ["mock", "telecom"])
def test_solo_mode_gold_replay_earns_reward_one(tokenizer, domain):
    tasks = TauTasks(domain, None, "base", "base", scoring=TauScoring(BASIS[domain]))
    prompts = tasks.splits["eval"]
    assert len(prompts) == {"mock": 8, "telecom": 20}[domain]  # the tasks with a ticket
    gold = gold_actions(domain)
    for prompt in prompts:
        assert prompt.task.ticket in prompt.messages()[0]["content"]
        engine = ScriptedEngine(tokenizer, solo_gold(gold[prompt.reference]))
        rollout = AgentRollout(None, LOOSE, env_factory=tasks.make_env)
        sampling = SamplingParams(max_new_tokens=512, stop_token_ids=(tokenizer.eos_token_id,))
        (e,) = rollout(engine, tokenizer, [prompt], TAU_REWARD, sampling)
        info = e.meta["env"]
        assert (e.finish_reason, e.rewards["tau"]) == ("agent_stop", 1.0), info["components"]
        requestors = [c["requestor"] for m in info["trajectory"] for c in m.get("tool_calls")
                      or []]
        assert requestors[:-1] == [a.requestor for a in gold[prompt.reference]]
    text = ScriptedEngine(tokenizer, ["I will look into it."])
    (e,) = AgentRollout(None, LOOSE, env_factory=tasks.make_env)(
        text, tokenizer, prompts[:1], TAU_REWARD, sampling)
    assert (e.finish_reason, e.rewards["tau"]) == ("agent_error", 0.0)


class ScriptUser:
    """Says ``lines`` in turn (a dict is a whole message); stops when the agent says
    "All done."; ``fail`` raises instead."""

    def __init__(self, lines=(), fail=False):
        self.lines, self.fail = list(lines), fail

    def respond(self, view):
        if self.fail:
            raise ConnectionError("the user endpoint is down")
        if view[-1].get("content") == "All done.":
            return user_message("###STOP###", None, "u")
        line = self.lines.pop(0) if self.lines else "Please go on."
        return line if isinstance(line, dict) else user_message(line, None, "u")


def one(tokenizer, replies, user, task="update_task_1", basis=("DB",)):
    tasks = TauTasks("mock", lambda t, tools: user, "base", "base",
                     scoring=TauScoring(basis))
    prompt = next(p for p in tasks.splits["eval"] if p.reference == task)
    sampling = SamplingParams(max_new_tokens=512, stop_token_ids=(tokenizer.eos_token_id,))
    engine = ScriptedEngine(tokenizer, list(replies))
    (e,) = AgentRollout(None, LoopLimits(max_turns=12, max_tokens=10**6),
                        env_factory=tasks.make_env)(engine, tokenizer, [prompt], TAU_REWARD,
                                                    sampling)
    return e


UPDATE = ('<tool_call>{"name": "update_task_status", "arguments": {"task_id": "task_1", '
          '"status": "completed"}}</tool_call>')


def test_bad_output_of_either_party_is_scored_not_crashed(tokenizer):
    # a malformed agent call is answered with its error and not replayed
    e = one(tokenizer, ['<tool_call>{"name": "update_task_status", "arguments": "x"}'
                        '</tool_call>', "Let me fix that. " + UPDATE, "All done."], ScriptUser())
    info = e.meta["env"]
    assert (e.rewards["tau"], info["infrastructure_error"]) == (1.0, None)
    first, second = [m for m in info["trajectory"] if m.get("tool_calls")][:2]
    assert first["tool_calls"][0]["name"] is None and "malformed" in first["tool_calls"][0]
    assert second["content"] == "Let me fix that."  # a mixed turn keeps its words
    # the same call again after the user's reply is not a loop
    e = one(tokenizer, [UPDATE, "Done?", UPDATE, "Again?", UPDATE, "All done."], ScriptUser())
    assert (e.finish_reason, e.rewards["tau"]) == ("user_stop", 1.0)
    # the user: a malformed call, then a blank message
    bad_call = user_message(None, [{"name": "check_notifications", "arguments": ["x"]}], "u")
    e = one(tokenizer, ["Hello?"] * 3, ScriptUser([bad_call, "  "]))
    info = e.meta["env"]
    assert (e.finish_reason, e.rewards["tau"]) == ("user_error", 0.0)
    assert [m["error"] for m in info["trajectory"] if m["role"] == "tool"] == [True]
    # a failing simulator ends the episode as an infrastructure error, not a crash
    e = one(tokenizer, ["Hello?"], ScriptUser(fail=True))
    assert e.finish_reason == "infrastructure_error"
    assert "the user endpoint is down" in e.meta["env"]["infrastructure_error"]
    summary = summarize([e])
    assert (summary["episodes"], summary["infrastructure_errors"]) == (0, 1)
