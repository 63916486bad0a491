"""``/v1/messages`` through the official ``anthropic`` client: text and tool_use blocks, tool
results, system prompts, stop sequences and the event stream, recorded and bridged like chat
completions; errors in Anthropic's format."""

import contextlib

import anthropic
import pytest
from serve_helpers import Scripted, served

from posttrain.harness import episode_problems

TOOLS = [{"name": "add", "description": "a + b", "input_schema": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]
USER = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture
def serve(tokenizer):
    with contextlib.ExitStack() as stack:
        def start(texts):
            url, sessions = stack.enter_context(served(Scripted(tokenizer, texts), tokenizer))
            return anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="session-b",
                                       max_retries=0), sessions
        yield start


def test_a_tool_using_conversation_round_trips_and_is_one_segment(serve, tokenizer):
    call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    client, sessions = serve(["Let me add." + call, "It is 5."])
    first = client.messages.create(model="tiny", max_tokens=32, messages=USER, tools=TOOLS,
                                   system="You can add.")
    assert first.stop_reason == "tool_use"
    text, tool_use = first.content
    assert text.text == "Let me add." and tool_use.name == "add"
    assert tool_use.input == {"a": 2, "b": 3}
    messages = [*USER, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result",
                                              "tool_use_id": tool_use.id, "content": "5"}]}]
    final = client.messages.create(model="tiny", max_tokens=32, messages=messages, tools=TOOLS,
                                   system="You can add.")
    assert final.content[0].text == "It is 5." and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == len(tokenizer.encode("It is 5.",
                                                             add_special_tokens=False)) + 1
    episode = sessions.episode("session-b")
    assert len(episode.segments) == 1 and episode.meta["splits"] == []
    assert episode_problems(episode, tokenizer) == []


def test_the_event_stream_carries_the_same_message(serve):
    client, _ = serve(["Five.", "Five."])
    whole = client.messages.create(model="tiny", max_tokens=16, messages=USER)
    with client.messages.stream(model="tiny", max_tokens=16, messages=USER) as stream:
        streamed = stream.get_final_message()
    assert [b.text for b in streamed.content] == [b.text for b in whole.content] == ["Five."]
    assert streamed.stop_reason == whole.stop_reason == "end_turn"
    assert streamed.usage.output_tokens == whole.usage.output_tokens


def test_a_stop_sequence_is_reported(serve):
    client, _ = serve(["Five. Then six."])
    reply = client.messages.create(model="tiny", max_tokens=16, messages=USER,
                                   stop_sequences=[" Then"])
    assert reply.content[0].text == "Five."
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == " Then"


def test_errors_come_in_anthropics_format(serve):
    client, _ = serve([])
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-nope", max_tokens=8, messages=USER)
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="tiny", max_tokens=8,
                               messages=[{"role": "system", "content": "x"}])
    assert "messages.0.role" in e.value.body["error"]["message"]
