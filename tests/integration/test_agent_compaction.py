"""Compaction inside the agent loop: every compaction closes a segment, the next segment starts
from the rebuilt context the engine was given, and every segment shares the episode's reward."""

import pytest
from agent_helpers import CALL, REWARD, TASK, ScriptedEngine, add

from posttrain.config import Compaction, LoopLimits
from posttrain.harness import AgentLoop, ToolRegistry, episode_problems
from posttrain.harness.compaction import (
    CLAUDE_CODE_CONTINUED,
    CODEX_PREFIX,
    SUMMARY_PROMPT,
    claude_code_summary,
    rebuild,
)
from posttrain.types import Batch, SamplingParams

TOOLS = ToolRegistry([add])
WINDOW = 400


def prompt_len(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, tools=TOOLS.schemas(), tokenize=False,
                                         add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special_tokens=False))


def run(tokenizer, replies, strategy, **kw):
    """Compaction triggers once the context outgrows the task prompt (after the first tool
    turn)."""
    ratio = (prompt_len(tokenizer, TASK) + 2) / WINDOW
    engine = ScriptedEngine(tokenizer, replies)
    loop = AgentLoop(engine, tokenizer, TOOLS, LoopLimits(max_tokens=WINDOW, loop_repeats=9),
                     compaction=Compaction(strategy, ratio=ratio, **kw))
    return engine, loop.run(TASK, SamplingParams(max_new_tokens=64), REWARD, "5")


def decode_context(tokenizer, seg, length):
    return tokenizer.decode(seg.token_ids[:length])


@pytest.mark.parametrize("strategy", ["discard_all", "discard_75"])
def test_discarding_closes_a_segment_and_restarts_from_the_task(tokenizer, strategy):
    engine, ep = run(tokenizer, [CALL, "<answer>5</answer>"], strategy, max_compactions=1)
    first, second = ep.segments
    assert ep.finish_reason == "answer" and ep.reward == 1.0 and ep.meta["compactions"] == 1
    assert first.token_ids[: len(engine.prompts[0])] == engine.prompts[0]
    # the second turn was given the task alone (the tool turn discarded), as segment 2's prompt
    assert engine.prompts[1] == second.token_ids[: len(engine.prompts[1])]
    assert len(engine.prompts[1]) == prompt_len(tokenizer, TASK)
    assert [s.num_trainable > 0 for s in ep.segments] == [True, True]
    assert ep.meta["segment_messages"][1] == TASK + [{"role": "assistant",
                                                      "content": "<answer>5</answer>"}]
    assert episode_problems(ep, tokenizer) == []
    batch = Batch.from_episodes([ep], tokenizer.pad_token_id)
    assert batch.rewards.tolist() == [1.0, 1.0]  # every segment carries the episode's reward


@pytest.mark.parametrize("train_summary", [True, False])
def test_summary_is_a_turn_of_its_own_and_the_rollout_restarts_from_it(tokenizer, train_summary):
    engine, ep = run(tokenizer, [CALL, "tried add(2, 3), got 5", "<answer>5</answer>"],
                     "summary", train_summary=train_summary, max_compactions=1)
    before, summary, after = ep.segments
    asked = tokenizer.decode(engine.prompts[1])
    assert asked.endswith(f"{SUMMARY_PROMPT}<|im_end|>\n<|im_start|>assistant\n")
    assert asked.startswith(tokenizer.decode(before.token_ids)[: -len("<|im_start|>assistant\n")])
    trained = tokenizer.decode([t for t, m in zip(summary.token_ids, summary.loss_mask) if m])
    assert trained == ("tried add(2, 3), got 5<|im_end|>" if train_summary else "")
    restart = tokenizer.decode(engine.prompts[2])
    assert restart.endswith("Summary of the work so far:\ntried add(2, 3), got 5<|im_end|>\n"
                            "<|im_start|>assistant\n") and "\"a\": 2" not in restart
    assert ep.reward == 1.0 and episode_problems(ep, tokenizer) == []
    steps = sum(len(s.steps) for s in ep.segments)
    assert steps == len(ep.meta["state_keys"]) == len(ep.meta["step_errors"]) == 2 + train_summary


def test_microcompact_clears_old_results_and_max_compactions_caps_triggers(tokenizer):
    calls = [CALL.replace('"b": 3', f'"b": {b}') for b in (3, 4, 5)]
    engine, ep = run(tokenizer, [*calls, "<answer>5</answer>"], "microcompact", keep_last=1,
                     max_compactions=2)
    assert ep.meta["compactions"] == 2 and len(ep.segments) == 3
    last = tokenizer.decode(engine.prompts[-1])
    # after call 1 there was nothing to clear (no compaction); calls 2 and 3 each cleared one
    assert last.count("[Old tool result content cleared]") == 2 and "\n7<|im_end|>" in last
    assert episode_problems(ep, tokenizer) == []


def test_codex_and_claude_code_rebuilds():
    task = [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}]
    history = [*task, {"role": "assistant", "content": CALL}, {"role": "tool", "content": "5"},
               {"role": "user", "content": "u2 " * 3}, {"role": "user", "content": "asked",
                                                        "injected": True}]
    codex = rebuild(Compaction("codex_compact", user_budget=1), task, history, "SUM",
                    lambda s: len(s.split()))
    assert codex == [task[0], task[1], {"role": "user", "content": f"{CODEX_PREFIX}\nSUM",
                                        "injected": True}, history[4]]
    cut = rebuild(Compaction("codex_compact", user_budget=0), task, history, "SUM", len)
    assert [m["content"] for m in cut] == ["S", f"{CODEX_PREFIX}\nSUM", "u2 " * 3]
    claude = rebuild(Compaction("claude_code_compact"), task, history,
                     "<analysis>why</analysis><summary>did X</summary>", len)
    assert claude == [task[0], {"role": "user", "content": f"{CLAUDE_CODE_CONTINUED}\ndid X",
                                "injected": True}]
    assert claude_code_summary("no tags") == "no tags"
    assert claude_code_summary("<analysis>unfinished") == ""


def test_bad_compaction_settings_are_refused():
    with pytest.raises(ValueError, match="unknown compaction strategy 'squash'"):
        Compaction("squash")
    with pytest.raises(ValueError, match=r"ratio must lie in \(0, 1\]"):
        Compaction("summary", ratio=0)
