"""What ``posttrain serve`` refuses, and how: the server's API key on every route, a body over
the limit (413, before it is read whole), JSON nested past Python's recursion (400, not a 500),
a conversation longer than the context window (400, before it is tokenised), unknown routes and
sessions (404 in the API's own error format), schema errors named as the client wrote them;
and a refused request or a read starts no session."""

import http.client
import json
import sys
import urllib.error
import urllib.request

import anthropic
import openai
import pytest
from serve_helpers import Scripted

from posttrain.serve import Completer, Sessions, create_app, running

USER = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture
def server(tokenizer):
    sessions = Sessions()
    completer = Completer(Scripted(tokenizer, ["5."] * 8), tokenizer, 512, 16)
    app = create_app(completer, sessions, "tiny", api_key="s3cret", max_body_bytes=2**16)
    with running(app) as url:
        yield url, sessions, completer


def post(url, path, body: bytes, key="s3cret", method="POST"):
    request = urllib.request.Request(url + path, data=body if method == "POST" else None,
                                     method=method, headers={
                                         "Content-Type": "application/json",
                                         **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_route_needs_the_key_and_sessions_are_named_after_it(server):
    url, sessions, _ = server
    body = json.dumps({"model": "tiny", "messages": USER}).encode()
    for key in (None, "wrong", "s3cretX"):
        status, answer = post(url, "/chat/completions", body, key=key)
        assert status == 401 and answer["error"]["code"] == "invalid_api_key"
    openai.OpenAI(base_url=url, api_key="s3cret:alice", max_retries=0).chat.completions.create(
        model="tiny", messages=USER)
    assert sessions.keys() == ["s3cret:alice"]
    # the session routes: without the key, neither read nor reward (no header: was a 200)
    assert post(url, "/sessions/s3cret:alice/reward", b'{"reward": 1000}', key=None)[0] == 401
    assert post(url, "/sessions/s3cret:alice/episode", b"", key=None, method="GET")[0] == 401
    status, body = post(url, "/sessions/s3cret:alice/reward", b'{"reward": 1}')
    assert (status, body["reward"]) == (200, 1.0)
    status, body = post(url, "/sessions/s3cret:alice/episode", b"", method="GET")
    assert status == 200 and body["reward"] == 1.0


def test_refused_requests_and_reads_start_no_session(server):
    url, sessions, _ = server
    client = openai.OpenAI(base_url=url, api_key="s3cret:bob", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=USER)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "nobody"}])
    status, body = post(url, "/sessions/s3cret:carol/episode", b"", method="GET")
    assert status == 404 and body["error"]["message"] == "no session 's3cret:carol'"
    assert post(url, "/sessions/s3cret:carol/reward", b'{"reward": 1}')[0] == 404
    assert sessions.keys() == []


def test_a_body_over_the_limit_is_413_and_deep_json_is_400(server):
    url, sessions, _ = server
    status, body = post(url, "/chat/completions", b" " * (2**16 + 1))
    assert status == 413 and body["error"]["code"] == "request_too_large"
    deep = b'{"model": "tiny", "messages": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    status, body = post(url, "/chat/completions", deep)
    assert status == 400 and "nested too deeply" in body["error"]["message"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)  # as some libraries do on import: the parse then succeeds
    try:
        status, body = post(url, "/chat/completions", deep)
    finally:
        sys.setrecursionlimit(limit)
    assert status == 400 and "nested too deeply" in body["error"]["message"]
    assert sessions.keys() == []


def test_a_conversation_past_the_window_is_refused_before_it_is_tokenised(server, tokenizer):
    url, _, completer = server
    longest = max(map(len, tokenizer.get_vocab()))
    text = "x" * (longest * 512 + 1)  # at least 513 tokens, whatever they are
    calls = []
    encode = completer.tokenizer.apply_chat_template
    completer.tokenizer.apply_chat_template = lambda *a, **k: calls.append(1) or encode(*a, **k)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": text}])
    finally:
        del completer.tokenizer.apply_chat_template
    assert e.value.body["code"] == "context_length_exceeded" and calls == []


def test_unknown_routes_answer_in_each_apis_format(server):
    url, _, _ = server
    status, body = post(url, "/messages/count_tokens", b"{}")
    assert status == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"
    status, body = post(url, "/responses/resp_1", b"", method="GET")
    assert status == 404 and body["error"]["type"] == "not_found_error"
    assert "GET /v1/responses/resp_1" in body["error"]["message"]


def test_an_anthropic_tool_schema_error_names_input_schema(server):
    url, _, _ = server
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="s3cret",
                                 max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]\.input_schema is not"):
        client.messages.create(model="tiny", max_tokens=8, messages=USER, tools=[
            {"name": "add", "input_schema": {"type": "nonsense"}}])


HUGE = "9" * 5000  # past Python's 4,300-digit limit on parsing an integer
PAST_FLOAT = "1" + "0" * 400  # 1e400 as an integer literal: parses, then overflows a float
CHAT = '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]'
MESSAGES = '{"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]'
BAD_REQUESTS = [
    ("POST", "/v1/chat/completions", CHAT + f', "n": {HUGE}}}'),
    ("POST", "/v1/chat/completions", CHAT + f', "temperature": {PAST_FLOAT}}}'),
    ("POST", "/v1/chat/completions", CHAT + f', "max_tokens": {PAST_FLOAT}}}'),
    ("POST", "/v1/messages", MESSAGES + f', "top_p": {HUGE}}}'),
    ("POST", "/v1/messages", MESSAGES + f', "temperature": {PAST_FLOAT}}}'),
    ("POST", "/v1/messages", MESSAGES + ', "top_k": -1}'),
    ("POST", "/v1/messages", " " * (2**16 + 1)),
    ("GET", "/v1/messages", ""),
    ("PUT", "/v1/messages", MESSAGES + "}"),
    ("DELETE", "/v1/chat/completions", ""),
    ("POST", "/v1/responses", f'{{"model": "tiny", "input": "hi", "max_output_tokens": {HUGE}}}'),
    ("POST", "/v1/sessions/s3cret/reward", f'{{"reward": {HUGE}}}'),
    ("POST", "/v1/sessions/s3cret/reward", f'{{"reward": {PAST_FLOAT}}}'),
    ("POST", "/v1/sessions/s3cret/reward", '{"reward": 1e400}'),
]


@pytest.mark.parametrize("method, path, body", BAD_REQUESTS,
                         ids=[f"{m} {p} {b[-24:]}" for m, p, b in BAD_REQUESTS])
def test_a_bad_request_is_a_4xx_in_its_apis_format_and_keeps_the_connection(
        server, method, path, body):
    """Every client-made error answers 4xx (never a 500, which also dropped the keep-alive
    connection) in the error format of the API asked; the next request on the connection is
    served."""
    url, _, _ = server
    openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0).chat.completions.create(
        model="tiny", messages=USER)  # the session the reward route names
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    auth = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
    connection.request(method, path, body.encode(), auth)
    answer = connection.getresponse()
    status, error = answer.status, json.loads(answer.read())
    assert 400 <= status < 500, (status, error)
    if path.startswith("/v1/messages"):
        assert error["type"] == "error" and error["error"]["type"] in (
            "invalid_request_error", "request_too_large", "not_found_error")
    else:
        assert error["error"]["type"] in ("invalid_request_error", "not_found_error")
    connection.request("GET", "/v1/models", headers=auth)  # the same connection
    assert connection.getresponse().status == 200


def test_the_model_list_needs_the_key(server):
    url, _, _ = server
    for key in (None, "wrong", "s3cre", "s3cretX"):
        status, body = post(url, "/models", b"", key=key, method="GET")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert post(url, "/models", b"", method="GET")[1]["data"][0]["id"] == "tiny"
    assert post(url, "/models", b"", key="s3cret:alice", method="GET")[0] == 200
