"""``/v1/responses`` through the official ``openai`` client: input items, function calls and
their outputs, ``previous_response_id`` and the event stream, recorded and bridged like chat
completions."""

import contextlib
import json

import openai
import pytest
from serve_helpers import Scripted, served

from posttrain.harness import episode_problems

TOOLS = [{"type": "function", "name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.fixture
def serve(tokenizer):
    with contextlib.ExitStack() as stack:
        def start(texts):
            url, sessions = stack.enter_context(served(Scripted(tokenizer, texts), tokenizer))
            return openai.OpenAI(base_url=url, api_key="session-c", max_retries=0), sessions
        yield start


def test_function_calls_and_outputs_round_trip_into_one_segment(serve, tokenizer):
    client, sessions = serve([CALL, "It is 5."])
    first = client.responses.create(model="tiny", input="What is 2+3?", tools=TOOLS,
                                    instructions="You can add.")
    (call,) = first.output
    assert call.type == "function_call" and call.name == "add"
    assert json.loads(call.arguments) == {"a": 2, "b": 3}
    final = client.responses.create(
        model="tiny", tools=TOOLS, instructions="You can add.",
        input=[{"role": "user", "content": "What is 2+3?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "5"}])
    assert final.output_text == "It is 5." and final.status == "completed"
    episode = sessions.episode("session-c")
    assert len(episode.segments) == 1 and episode.meta["splits"] == []
    assert episode_problems(episode, tokenizer) == []


def test_previous_response_id_continues_the_stored_conversation(serve, tokenizer):
    client, sessions = serve(["Five.", "Six."])
    first = client.responses.create(model="tiny", input="What is 2+3?")
    second = client.responses.create(model="tiny", input="And 3+3?",
                                     previous_response_id=first.id)
    assert (first.output_text, second.output_text) == ("Five.", "Six.")
    episode = sessions.episode("session-c")
    assert len(episode.segments) == 1 and episode.meta["calls"] == 2
    with pytest.raises(openai.BadRequestError, match="no stored response"):
        client.responses.create(model="tiny", input="x", previous_response_id="resp_nope")


def test_the_event_stream_ends_with_the_whole_response(serve):
    client, _ = serve(["Five. And more.", CALL])
    events = list(client.responses.create(model="tiny", input="What is 2+3?", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Five. And more." and events[-1].type == "response.completed"
    assert events[-1].response.output_text == deltas
    assert [e.sequence_number for e in events] == list(range(len(events)))
    with client.responses.stream(model="tiny", input="Add.", tools=TOOLS) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "function_call" and final.output[0].name == "add"
