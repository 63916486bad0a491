"""AgentLoop: the recorded tokens are exactly what the engine saw; masks, stop reasons, and a
garbage-emitting model never crashes."""

import pytest
from agent_helpers import CALL, REWARD, TASK, ScriptedEngine, add

from posttrain.config import LoopLimits
from posttrain.engines import TorchEngine
from posttrain.harness import STOP_REASONS, AgentLoop, ToolRegistry
from posttrain.types import SamplingParams


def run(tokenizer, replies, limits=LoopLimits(), eos=True, **kw):
    engine = ScriptedEngine(tokenizer, replies, eos)
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]), limits, **kw)
    return engine, loop.run(TASK, SamplingParams(max_new_tokens=64), REWARD, "5")


def test_recorded_tokens_are_the_engine_stream_and_only_samples_train(tokenizer):
    engine, ep = run(tokenizer, [CALL, "<answer>5</answer>"],
                     state_key=lambda msgs: len(msgs))
    seg = ep.segments[0]
    assert ep.finish_reason == "answer" and ep.reward == 1.0 and ep.meta["final"].endswith(
        "</answer>")
    for prompt in engine.prompts:  # each turn's input is a prefix of the record
        assert seg.token_ids[: len(prompt)] == prompt
    second = engine.prompts[1]
    text = tokenizer.decode(second)
    assert "<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n" in text
    trained = tokenizer.decode([t for t, m in zip(seg.token_ids, seg.loss_mask) if m])
    assert trained == CALL + "<|im_end|><answer>5</answer><|im_end|>"
    assert [s.end - s.start for s in seg.steps] == [
        len(tokenizer.encode(CALL)) + 1, len(tokenizer.encode("<answer>5</answer>")) + 1]
    assert all(lp == -0.5 for lp, m in zip(seg.logprobs, seg.loss_mask) if m)
    assert ep.meta["state_keys"] == [1, 3] and ep.meta["tool_errors"] == 0
    # the final record equals a fresh rendering of the whole conversation with the template
    rendered = tokenizer.apply_chat_template(ep.meta["messages"], tools=[
        ToolRegistry([add]).schemas()[0]], tokenize=False)
    assert tokenizer.decode(seg.token_ids) + "\n" == rendered


@pytest.mark.parametrize("replies,limits,eos,stop", [
    ([CALL] * 5, LoopLimits(max_turns=2, loop_repeats=9), True, "max_turns"),
    ([CALL] * 5, LoopLimits(loop_repeats=3), True, "loop"),
    (['<tool_call>{"name": "nope"}</tool_call>'] * 5, LoopLimits(max_tool_errors=1), True,
     "tool_errors"),
    (["<answer>5</answer>" * 50], LoopLimits(), False, "max_tokens"),
    ([CALL] * 5, LoopLimits(max_tokens=70, loop_repeats=9), True, "max_tokens"),
    ([CALL] * 5, LoopLimits(timeout_s=0.0), True, "timeout"),
])
def test_stop_reasons(tokenizer, replies, limits, eos, stop):
    _, ep = run(tokenizer, replies, limits, eos)
    assert ep.finish_reason == stop and stop in STOP_REASONS
    assert ep.reward == 0.0  # no final answer


def test_errors_are_observations_the_model_reads(tokenizer):
    engine, ep = run(tokenizer, ['<tool_call>{"name": "add", "arguments": {"a": "x"}}'
                                 "</tool_call>", "<answer>5</answer>"])
    assert ep.finish_reason == "answer" and ep.meta["tool_errors"] == 1
    assert "bad arguments for add" in tokenizer.decode(engine.prompts[1])


def test_a_random_model_gets_a_stop_reason_and_reward_zero(model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]),
                     LoopLimits(max_turns=3, max_new_tokens=16, max_tokens=400))
    for seed in range(3):
        ep = loop.run(TASK, SamplingParams(max_new_tokens=16, seed=seed), REWARD, "5")
        assert ep.finish_reason in STOP_REASONS and ep.reward == 0.0
        assert ep.segments[0].num_trainable > 0


def test_replay_finds_recorded_episodes_consistent_and_flags_tampering(tokenizer, tiny_dir,
                                                                      tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.app import app
    from posttrain.harness import episode_problems
    from posttrain.types import write_episodes

    _, good = run(tokenizer, [CALL, "<answer>5</answer>"])
    assert episode_problems(good, tokenizer) == []
    _, bad = run(tokenizer, [CALL, "<answer>5</answer>"])
    seg = bad.segments[0]
    first_scaffold = seg.loss_mask.index(0, seg.steps[0].end)
    seg.loss_mask[first_scaffold] = 1  # a tool-output token marked trainable
    bad.meta["messages"][-1]["content"] = "<answer>6</answer>"  # record disagrees with tokens
    problems = episode_problems(bad, tokenizer)
    assert any("no weight version" in p for p in problems)
    assert any("do not decode" in p for p in problems)
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [good, bad])
    runner = CliRunner()
    result = runner.invoke(app, ["replay", str(path), "--model", str(tiny_dir)])
    assert result.exit_code == 1 and "1 of 2 episodes consistent" in result.output
    write_episodes(path, [good])
    assert runner.invoke(app, ["replay", str(path), "--model", str(tiny_dir)]).exit_code == 0


def test_guard_blocks_or_zeroes_and_the_rollout_continues(tokenizer):
    from posttrain.harness.guard import BLOCKED, Guard

    hack = '<tool_call>{"name": "add_any", "arguments": {"a": 2, "b": 3, "note": "git log"}}' \
           "</tool_call>"
    def add_any(a: int, b: int, note: str = "") -> int:
        """Add.

        Args:
            a: First.
            b: Second.
            note: Anything.
        """
        return a + b

    for policy, reward in (("block", 1.0), ("zero_reward", 0.0)):
        engine = ScriptedEngine(tokenizer, [hack, "<answer>5</answer>"])
        loop = AgentLoop(engine, tokenizer, ToolRegistry([add_any]), guard=Guard(on_hack=policy))
        ep = loop.run(TASK, SamplingParams(max_new_tokens=64), REWARD, "5")
        assert ep.finish_reason == "answer" and ep.reward == reward
        assert ep.meta["guard_flags"] == 1 and ep.meta["guard_blocks"] == (policy == "block")
        shown = tokenizer.decode(engine.prompts[1])
        assert (BLOCKED in shown) == (policy == "block") and ("5<|im_end|>" in shown) != (
            policy == "block")


def test_a_sibling_near_its_window_does_not_cut_other_turns_short(tokenizer):
    answer = "<answer>5</answer>"
    short = [{"role": "user", "content": "What is 2+3?"}]
    long_ = [{"role": "user", "content": "What is 2+3? " + "Please think. " * 20}]
    engine = ScriptedEngine(tokenizer, [answer, answer])
    loop = AgentLoop(engine, tokenizer, ToolRegistry([add]), LoopLimits(max_new_tokens=64))
    long_len = len(loop.encode(loop.render(long_, True)))
    loop.limits = LoopLimits(max_tokens=long_len + 2, max_new_tokens=64)
    near, free = loop.run_many([(long_, "5", "a"), (short, "5", "b")],
                               SamplingParams(max_new_tokens=64), REWARD)
    assert near.finish_reason == "max_tokens" and near.segments[0].num_trainable == 2
    assert free.finish_reason == "answer" and free.reward == 1.0


def test_every_environment_is_closed_when_a_batch_fails(tokenizer):
    closed = []

    class Env:
        tools = ToolRegistry([add])

        def verdict(self, final):
            return {}

        def close(self):
            closed.append(True)

    class DeadEngine:
        version = 0

        def generate(self, prompts, sampling, seeds=None):
            raise RuntimeError("engine died")

    loop = AgentLoop(DeadEngine(), tokenizer, ToolRegistry([add]), env_factory=lambda r: Env())
    with pytest.raises(RuntimeError, match="engine died"):
        loop.run_many([(TASK, "5", "a")] * 2, SamplingParams(max_new_tokens=8), REWARD)
    assert closed == [True, True]
