"""§11 context management: triggers and the deterministic strategies, on the spec's examples."""

from posttrain.config import Compaction
from posttrain.harness.context import (
    CLEARED,
    discard_tool_turns,
    drop_reasoning_on_new_user,
    microcompact,
    select_recent_user_messages,
)


def tool_history(n):
    msgs = [{"role": "user", "content": "task"}]
    for k in range(n):
        msgs += [{"role": "assistant", "content": f'<tool_call>{{"name": "t{k}"}}</tool_call>'},
                 {"role": "tool", "content": f"result {k}"}]
    return msgs + [{"role": "assistant", "content": "done"}]


def test_trigger():
    """``used > ratio * window``, at most ``max_compactions`` times an episode."""
    c = Compaction("microcompact")
    assert c.due(801, 1000, 0) and not c.due(800, 1000, 0)
    assert Compaction("microcompact", ratio=0.9).due(901, 1000, 0)
    assert not c.due(801, 1000, c.max_compactions) and not Compaction().due(10**6, 1000, 0)


def test_discard_75_drops_the_oldest_ceil_share_of_tool_turns():
    out = discard_tool_turns(tool_history(8))
    assert [m["content"] for m in out if m["role"] == "tool"] == ["result 6", "result 7"]
    assert out[0]["content"] == "task" and out[-1]["content"] == "done"
    one = discard_tool_turns(tool_history(1))  # ceil: n = 1 still frees space
    assert [m["role"] for m in one] == ["user", "assistant"]
    assert [m["role"] for m in discard_tool_turns(tool_history(3), 1.0)] == ["user", "assistant"]


def test_microcompact_keeps_the_last_five_results():
    out = microcompact(tool_history(7))
    results = [m["content"] for m in out if m["role"] == "tool"]
    assert results[:2] == [CLEARED, CLEARED] and results[2:] == [f"result {k}" for k in range(2, 7)]


def test_codex_keeps_recent_user_messages_within_budget():
    assert select_recent_user_messages([8000, 9000, 6000, 5000]) == [1, 2, 3]
    assert select_recent_user_messages([30000]) == []


def test_drop_reasoning_on_new_user_spec_example():
    msgs = [{"role": "user", "content": "u1"},
            {"role": "assistant", "content": "", "reasoning_content": "think1"},
            {"role": "assistant", "content": "<tool_call>{}</tool_call>"},
            {"role": "tool", "content": "result1"},
            {"role": "assistant", "content": "answer1", "reasoning_content": "think2"},
            {"role": "user", "content": "u2"}]
    out = drop_reasoning_on_new_user(msgs)
    assert [m["content"] for m in out] == ["u1", "<tool_call>{}</tool_call>", "result1",
                                           "answer1", "u2"]
    assert all("reasoning_content" not in m for m in out)
    current = msgs[:5]  # no new user message yet: the chain keeps its reasoning
    assert drop_reasoning_on_new_user(current) == current


def test_reasoning_retention_modes():
    import pytest

    from posttrain.harness.context import retain_reasoning

    plain = [{"role": "user", "content": "u1"},
             {"role": "assistant", "content": "a1", "reasoning_content": "t1"},
             {"role": "user", "content": "u2"}]
    tooled = [*plain[:1], {"role": "assistant", "content": "<tool_call>{}</tool_call>",
                           "reasoning_content": "t0"}, *plain[1:]]
    assert "reasoning_content" not in retain_reasoning(plain)[1]  # auto_v4 without tools
    assert retain_reasoning(tooled) == tooled  # auto_v4 with tools keeps everything
    assert retain_reasoning(plain, "keep_all") == plain
    with pytest.raises(ValueError, match="retention"):
        retain_reasoning(plain, "forget")
