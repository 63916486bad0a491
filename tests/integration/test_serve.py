"""``posttrain serve`` through the official ``openai`` client: chat completions (streamed and
not) answer as the engine samples, every call is recorded token for token and bridged across
turns, tool calls come back structured (a malformed one as text), and bad requests get 4xx
errors in OpenAI's format."""

import contextlib
import json
import urllib.error
import urllib.request

import openai
import pytest
from serve_helpers import Scripted, served

from posttrain.engines import TorchEngine
from posttrain.harness import episode_problems
from posttrain.models import encode_prompt
from posttrain.types import SamplingParams

USER = [{"role": "user", "content": "What is 2+3?"}]


def post(url: str, data: bytes, key: str | None = "session-a") -> tuple[int, dict]:
    """A raw POST (what a client that is not the SDK sends): status and JSON body."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def serve(tokenizer):
    """``serve(engine) -> (client, sessions, base_url)`` inside a running server."""
    with contextlib.ExitStack() as stack:
        def start(engine):
            url, sessions = stack.enter_context(served(engine, tokenizer))
            return openai.OpenAI(base_url=url, api_key="session-a", max_retries=0), \
                sessions, url
        yield start


def test_streamed_and_whole_completions_are_the_engines_sample_and_are_recorded(
        serve, model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    client, sessions, _ = serve(engine)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    whole = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8, seed=5,
                                           logprobs=True)
    streamed = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                              seed=5, stream=True,
                                              stream_options={"include_usage": True})
    chunks = list(streamed)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 8
    prompt = encode_prompt(tokenizer, USER)
    (sample,) = engine.generate([prompt], SamplingParams(
        max_new_tokens=8, temperature=1.0, seed=5, stop_token_ids=(tokenizer.eos_token_id,)))
    episode = sessions.episode("session-a")
    first = episode.segments[0]
    assert first.token_ids == prompt + sample.token_ids
    assert first.loss_mask == [0] * len(prompt) + [1] * 8
    assert [lp.logprob for lp in whole.choices[0].logprobs.content] == \
        first.logprobs[len(prompt):] == sample.logprobs
    assert whole.usage.prompt_tokens == len(prompt)


def test_anthropics_top_k_is_honoured(serve, model, tokenizer):
    """top_k=1 keeps only the likeliest token: at temperature 1 the reply is the greedy one
    (it was accepted and ignored, so the reply was an ordinary sample)."""
    import anthropic

    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    _, sessions, url = serve(engine)
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="session-a",
                                 max_retries=0)
    client.messages.create(model="tiny", max_tokens=12, messages=USER, extra_body={"top_k": 1})
    prompt = encode_prompt(tokenizer, USER)
    (greedy,) = engine.generate([prompt], SamplingParams(
        max_new_tokens=12, temperature=0.0, stop_token_ids=(tokenizer.eos_token_id,)))
    (sampled,) = engine.generate([prompt], SamplingParams(
        max_new_tokens=12, temperature=1.0, seed=0, stop_token_ids=(tokenizer.eos_token_id,)))
    assert sampled.token_ids != greedy.token_ids  # so the check below can fail
    (segment,) = sessions.episode("session-a").segments
    assert segment.token_ids[len(prompt):] == greedy.token_ids


def test_a_conversation_is_bridged_into_one_segment_that_replays(serve, tokenizer):
    client, sessions, _ = serve(Scripted(tokenizer, ["Five.", "Six, since 3+3=6."]))
    messages = list(USER)
    for question in ("And 3+3?", None):
        reply = client.chat.completions.create(model="tiny", messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        if question:
            messages.append({"role": "user", "content": question})
    episode = sessions.episode("session-a")
    assert len(episode.segments) == 1 and episode.meta["splits"] == []
    (segment,) = episode.segments
    sampled = [t for t, m in zip(segment.token_ids, segment.loss_mask) if m]
    assert tokenizer.decode(sampled) == "Five.<|im_end|>Six, since 3+3=6.<|im_end|>"
    assert set(segment.versions[t] for t, m in enumerate(segment.loss_mask) if m) == {7}
    assert episode_problems(episode, tokenizer) == []  # posttrain replay's check


def test_a_rewritten_history_starts_a_new_segment_and_is_counted(serve, tokenizer):
    client, sessions, _ = serve(Scripted(tokenizer, ["Five.", "Six."]))
    reply = client.chat.completions.create(model="tiny", messages=USER)
    edited = [*USER, {"role": "assistant", "content": reply.choices[0].message.content + "!"},
              {"role": "user", "content": "And 3+3?"}]
    client.chat.completions.create(model="tiny", messages=edited)
    episode = sessions.episode("session-a")
    assert len(episode.segments) == 2
    (split,) = episode.meta["splits"]
    prompt = encode_prompt(tokenizer, USER)
    five = len(tokenizer.encode("Five.", add_special_tokens=False))
    assert split["call"] == 2 and split["position"] == len(prompt) + five  # where "!" went
    # nothing sampled was re-tokenised: each segment keeps its own sampled tokens (and eos)
    assert [sum(s.loss_mask) for s in episode.segments] == [
        len(tokenizer.encode(t, add_special_tokens=False)) + 1 for t in ("Five.", "Six.")]
    assert episode_problems(episode, tokenizer) == []


def test_tool_calls_come_back_structured_and_bridge_with_their_results(serve, tokenizer):
    call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    client, sessions, _ = serve(Scripted(tokenizer, [call, "It is 5."]))
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
    reply = client.chat.completions.create(model="tiny", messages=USER, tools=tools)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "add"
    assert json.loads(tool_call.function.arguments) == {"a": 2, "b": 3}
    messages = [*USER, choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": tool_call.id, "content": "5"}]
    final = client.chat.completions.create(model="tiny", messages=messages, tools=tools)
    assert final.choices[0].message.content == "It is 5."
    episode = sessions.episode("session-a")
    assert len(episode.segments) == 1 and episode.meta["tools"] == tools


def test_a_malformed_tool_call_comes_back_as_text_not_an_error(serve, tokenizer):
    broken = '<tool_call>{"name": add, "arguments": {}}</tool_call>'
    client, _, _ = serve(Scripted(tokenizer, [broken]))
    choice = client.chat.completions.create(model="tiny", messages=USER).choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == broken


def test_n_choices_branch_and_the_one_continued_is_bridged(serve, tokenizer):
    client, sessions, _ = serve(Scripted(tokenizer, ["Five.", "5.", "Yes."]))
    reply = client.chat.completions.create(model="tiny", messages=USER, n=2)
    assert [c.message.content for c in reply.choices] == ["Five.", "5."]
    client.chat.completions.create(model="tiny", messages=[
        *USER, {"role": "assistant", "content": "5."}, {"role": "user", "content": "Sure?"}])
    episode = sessions.episode("session-a")
    assert episode.meta["splits"] == []  # the second choice was continued
    assert [tokenizer.decode([t for t, m in zip(s.token_ids, s.loss_mask) if m])
            for s in episode.segments] == ["Five.<|im_end|>", "5.<|im_end|>Yes.<|im_end|>"]


def test_stop_strings_cut_the_text_and_the_recorded_tokens(serve, tokenizer):
    client, sessions, _ = serve(Scripted(tokenizer, ["Five. Then six."]))
    choice = client.chat.completions.create(model="tiny", messages=USER,
                                            stop=[" Then"]).choices[0]
    assert choice.message.content == "Five." and choice.finish_reason == "stop"
    (segment,) = sessions.episode("session-a").segments
    assert tokenizer.decode([t for t, m in zip(segment.token_ids, segment.loss_mask) if m]) \
        .startswith("Five. Then")  # up to the token that completed the stop string


@pytest.mark.parametrize("body,status,code,param", [
    ({"model": "nope", "messages": USER}, 404, "model_not_found", "model"),
    ({"model": "tiny", "messages": []}, 400, "invalid_request", "messages"),
    ({"model": "tiny", "messages": USER, "temperature": 9}, 400, "invalid_request",
     "temperature"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x " * 600}]}, 400,
     "context_length_exceeded", "messages"),
    ({"model": "tiny", "messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "objekt"}}}]}, 400, "invalid_request",
     "tools.0.function.parameters"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, 400,
     "invalid_request", "messages.0.role"),
])
def test_bad_requests_get_4xx_in_openais_error_format(serve, tokenizer, body, status, code,
                                                      param):
    _, _, url = serve(Scripted(tokenizer, []))
    code_, reply = post(f"{url}/chat/completions", json.dumps(body).encode())
    assert code_ == status, reply
    error = reply["error"]
    assert error["code"] == code and error["param"] == param and error["message"]


def test_a_body_that_is_not_json_or_has_no_key_is_refused(serve, tokenizer):
    _, _, url = serve(Scripted(tokenizer, []))
    status, reply = post(f"{url}/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in reply["error"]["message"]
    status, reply = post(f"{url}/chat/completions",
                         json.dumps({"model": "tiny", "messages": USER}).encode(), key=None)
    assert status == 401 and reply["error"]["type"] == "authentication_error"


def test_a_client_that_disconnects_mid_stream_loses_nothing(serve, tokenizer):
    """The turn was sampled before the first byte was sent: it is recorded, and the server
    goes on serving."""
    import http.client
    from urllib.parse import urlparse

    client, sessions, url = serve(Scripted(tokenizer, ["Five, and a long reply after it.",
                                                       "Six."]))
    where = urlparse(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    connection.request("POST", "/v1/chat/completions", json.dumps({
        "model": "tiny", "messages": USER, "stream": True}),
        {"Content-Type": "application/json", "Authorization": "Bearer session-a"})
    response = connection.getresponse()
    assert response.status == 200 and response.read(40)  # a first chunk, then hang up
    connection.close()
    again = client.chat.completions.create(model="tiny", messages=USER)
    assert again.choices[0].message.content == "Six."
    episode = sessions.episode("session-a")
    assert episode.meta["calls"] == 2
    assert tokenizer.decode([t for t, m in zip(episode.segments[0].token_ids,
                                               episode.segments[0].loss_mask) if m]) \
        .startswith("Five, and a long reply")
