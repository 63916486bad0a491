"""The edges of ``posttrain serve`` a real agent meets: tool calls replayed as sampled (so a
client's re-serialised arguments still bridge) with unique ids, interleaved conversations in
one session, Anthropic's assistant prefill, malformed client messages, responses of another
session, non-finite rewards, and a paused engine."""

import contextlib
import json

import openai
import pytest
from serve_helpers import Scripted, served

USER = [{"role": "user", "content": "What is 2+3?"}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2.50, "b": 3}}</tool_call>'


@pytest.fixture
def serve(tokenizer):
    with contextlib.ExitStack() as stack:
        def start(texts, key="edge"):
            url, sessions = stack.enter_context(served(Scripted(tokenizer, texts), tokenizer))
            return openai.OpenAI(base_url=url, api_key=key, max_retries=0), sessions, url
        yield start


def test_returned_calls_replay_as_sampled_and_ids_are_unique(serve):
    client, sessions, _ = serve([CALL, CALL, "It is 8."])
    messages = list(USER)
    ids = []
    for _ in range(2):
        choice = client.chat.completions.create(model="tiny", messages=messages,
                                                tools=TOOLS).choices[0]
        (call,) = choice.message.tool_calls
        ids.append(call.id)
        # the client parses and re-serialises the arguments: 2.50 becomes 2.5
        sent = {**choice.message.model_dump(exclude_none=True), "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": "add", "arguments": json.dumps(json.loads(call.function.arguments))}}]}
        messages += [sent, {"role": "tool", "tool_call_id": call.id, "content": "5.5"}]
    client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
    assert len(set(ids)) == 2  # a new id for every call
    episode = sessions.episode("edge")
    assert len(episode.segments) == 1 and episode.meta["splits"] == []


def test_interleaved_conversations_in_one_session_each_continue_their_own(serve, tokenizer):
    client, sessions, _ = serve(["A1.", "B1.", "A2.", "B2."])
    a = [{"role": "user", "content": "Conversation A"}]
    b = [{"role": "user", "content": "Conversation B"}]
    for conversation in (a, b, a, b):
        reply = client.chat.completions.create(model="tiny", messages=conversation)
        conversation += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "go on"}]
    episode = sessions.episode("edge")
    (split,) = episode.meta["splits"]  # B's first call starts a conversation; none after
    assert split["call"] == 2
    assert sorted(tokenizer.decode([t for t, m in zip(s.token_ids, s.loss_mask) if m])
                  for s in episode.segments) == ["A1.<|im_end|>A2.<|im_end|>",
                                                 "B1.<|im_end|>B2.<|im_end|>"]


def test_an_anthropic_prefill_is_continued_not_closed(serve, tokenizer):
    import anthropic

    _, sessions, url = serve(['"answer": 5}'])
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="edge",
                                 max_retries=0)
    client.messages.create(model="tiny", max_tokens=16, messages=[
        *USER, {"role": "assistant", "content": '{"reply": 1, '}])
    (segment,) = sessions.episode("edge").segments
    prompt = tokenizer.decode([t for t, m in zip(segment.token_ids, segment.loss_mask)
                               if not m])
    assert prompt.endswith('<|im_start|>assistant\n{"reply": 1, ')  # left open


@pytest.mark.parametrize("message,param", [
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "x", "function": {}}]},
     "messages.1.tool_calls.0"),
    ({"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "add", "arguments": "not json"}}]},
     "messages.1.tool_calls.0"),
])
def test_malformed_client_messages_are_400s_naming_them(serve, message, param):
    client, _, _ = serve([])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[*USER, message])
    assert e.value.body["param"] == param


def test_a_session_cannot_continue_another_sessions_response(serve, tokenizer):
    client, _, url = serve(["Five."])
    first = client.responses.create(model="tiny", input="What is 2+3?")
    other = openai.OpenAI(base_url=url, api_key="someone-else", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="no stored response"):
        other.responses.create(model="tiny", input="x", previous_response_id=first.id)


def test_a_reward_must_be_a_finite_number(serve):
    import urllib.error
    import urllib.request

    client, _, url = serve(["5."])
    client.chat.completions.create(model="tiny", messages=USER)  # the session "edge" starts
    for body in (b'{"reward": NaN}', b'{"reward": "1"}'):
        request = urllib.request.Request(f"{url}/sessions/edge/reward", data=body,
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request)
        assert e.value.code == 400


def test_a_paused_engine_answers_503_and_serves_again_when_resumed(tokenizer):
    from posttrain.serve import Completer, Sessions, create_app, running

    completer = Completer(Scripted(tokenizer, ["5."]), tokenizer, 512, 16)
    with running(create_app(completer, Sessions(), "tiny", any_model=True)) as url:
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        completer.batcher.pause()
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model="claude-anything", messages=USER)
        assert e.value.status_code == 503 and e.value.body["code"] == "engine_busy"
        completer.batcher.resume()
        reply = client.chat.completions.create(model="claude-anything", messages=USER)
        assert reply.choices[0].message.content == "5."
