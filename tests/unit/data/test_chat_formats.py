"""Conversation rows in OpenAI, ShareGPT and TRL form become the same chat messages; tool
calls, tool results, reasoning and per-row tools survive a trip through ``datasets``; and the
assistant-only loss mask of a rendered multi-turn tool trace is exactly the template's own
assistant spans."""

import json

import pytest

from posttrain.data import load_chat_data
from posttrain.data.chat_formats import conversation
from posttrain.models import build_tokenizer, encode_chat

CALC = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Look facts up.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "k": {"type": "integer"}},
                   "required": ["query"]}}}
OPENAI = {"messages": [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "What is 12*7?"},
    {"role": "assistant", "content": None, "reasoning_content": "multiply",
     "tool_calls": [{"id": "c0", "type": "function",
                     "function": {"name": "calculate", "arguments": '{"expression": "12*7"}'}}]},
    {"role": "tool", "content": "84", "tool_call_id": "c0", "name": "calculate"},
    {"role": "assistant", "content": "<answer>84</answer>"}], "tools": [CALC]}
TRACE = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "What is 12*7?"},
    {"role": "assistant", "content": "", "reasoning_content": "multiply",
     "tool_calls": [{"type": "function", "id": "c0",
                     "function": {"name": "calculate", "arguments": {"expression": "12*7"}}}]},
    {"role": "tool", "content": "84", "tool_call_id": "c0", "name": "calculate"},
    {"role": "assistant", "content": "<answer>84</answer>"}]


def test_an_openai_trace_keeps_tool_calls_results_and_reasoning():
    c = conversation(OPENAI)
    assert c.messages == TRACE and c.tools == [CALC]


def test_sharegpt_and_trl_rows_give_the_same_messages():
    sharegpt = {"conversations": [
        {"from": "system", "value": "Use tools."}, {"from": "human", "value": "What is 12*7?"},
        {"from": "function_call", "value": '{"name": "calculate", "arguments": {"expression": '
                                           '"12*7"}}'},
        {"from": "observation", "value": "84"}, {"from": "gpt", "value": "<answer>84</answer>"}]}
    got = conversation(sharegpt).messages
    assert [m["role"] for m in got] == [m["role"] for m in TRACE]
    assert got[2]["tool_calls"][0]["function"] == TRACE[2]["tool_calls"][0]["function"]
    trl = conversation({"prompt": "What is 1+1?", "completion": "<answer>2</answer>"})
    assert trl.messages == [{"role": "user", "content": "What is 1+1?"},
                            {"role": "assistant", "content": "<answer>2</answer>"}]
    trl = conversation({"prompt": [{"role": "user", "content": "hi"}],
                        "completion": [{"role": "assistant", "content": "yo"}]})
    assert trl.messages[-1] == {"role": "assistant", "content": "yo"}


def test_rows_read_through_datasets_keep_their_own_arguments_and_tools(tmp_path):
    """A search call must not come back with an ``expression: null`` argument (``datasets``
    before 5.0 gives every row the union of its column's struct fields)."""
    search = {"messages": [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
            "name": "search", "arguments": {"query": "France capital", "k": 2}}}]},
        {"role": "tool", "content": "Paris", "tool_call_id": "c0"},
        {"role": "assistant", "content": "<answer>Paris</answer>"}], "tools": [SEARCH]}
    calc = json.loads(json.dumps(OPENAI))
    calc["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"expression": "12*7"}
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(calc) + "\n" + json.dumps(search) + "\n")
    data = load_chat_data(path)
    assert data.conversations[0] == TRACE and data.tools[0] == [CALC]
    assert data.conversations[1][1]["tool_calls"][0]["function"]["arguments"] == \
        {"query": "France capital", "k": 2}
    assert data.tools[1] == [SEARCH]


@pytest.mark.parametrize("row, reason", [
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None,
      "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]}, "not JSON"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None}]},
     "needs string content"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, "ShareGPT turn"),
    ({"text": "x"}, "it has text"),
])
def test_a_malformed_row_says_what_is_wrong(row, reason):
    with pytest.raises(ValueError, match=reason):
        conversation(row)


def test_the_loss_mask_is_exactly_the_templates_assistant_spans():
    """encode_chat's mask, built turn by turn from generation prompts, against the template's
    own ``{% generation %}`` spans as transformers reports them."""
    tok = build_tokenizer(512)
    trace = TRACE + [{"role": "user", "content": "And 84+1?"},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"type": "function", "function": {
                             "name": "calculate", "arguments": {"expression": "84+1"}}}]},
                     {"role": "tool", "content": "85"},
                     {"role": "assistant", "content": "<answer>85</answer>"}]
    ids, mask = encode_chat(tok, trace, [CALC])
    rendered = tok.apply_chat_template(trace, tools=[CALC], tokenize=True, return_dict=True,
                                       return_assistant_tokens_mask=True)
    assert ids == rendered["input_ids"]
    assert mask == rendered["assistant_masks"]
    assert sum(mask) > 0 and tok.decode([t for t, m in zip(ids, mask) if m]).count(
        "<tool_call>") == 2
