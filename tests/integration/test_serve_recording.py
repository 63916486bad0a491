"""``--record``: a session's episode is appended when its agent posts a reward or it falls
idle; the open ones are snapshotted, and a killed server's snapshot is appended by the next
recorder on the file, without the sessions that ended after it was taken."""

import json
import urllib.error
import urllib.request

import openai
import pytest
from serve_helpers import Scripted

from posttrain.serve import Completer, Sessions, create_app, running
from posttrain.serve.recording import Recorder, RecordError
from posttrain.types import read_episodes

USER = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture
def server(tokenizer, tmp_path):
    sessions = Sessions()
    recorder = Recorder(tmp_path / "sessions.jsonl", sessions, every_s=3600, idle_s=3600)
    completer = Completer(Scripted(tokenizer, ["5."] * 16), tokenizer, 512, 16)
    with running(create_app(completer, sessions, "tiny", recorder=recorder)) as url:
        def chat(key):
            openai.OpenAI(base_url=url, api_key=key, max_retries=0).chat.completions.create(
                model="tiny", messages=USER)
        yield url, chat, recorder


def reward(url, key, value):
    request = urllib.request.Request(f"{url}/sessions/{key}/reward", method="POST",
                                     data=json.dumps({"reward": value}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        return r.status


def recorded(recorder):
    return [(e.meta["session"], e.meta["calls"], e.reward) for e in read_episodes(recorder.path)]


def test_a_posted_reward_ends_the_session_into_the_record(server):
    url, chat, recorder = server
    chat("alice")
    chat("alice")
    assert not recorder.path.exists()  # nothing ended yet
    assert reward(url, "alice", 0.5) == 200
    assert recorded(recorder) == [("alice", 2, 0.5)]
    with pytest.raises(urllib.error.HTTPError) as e:  # ended: it is in the record
        urllib.request.urlopen(f"{url}/sessions/alice/episode")
    assert e.value.code == 404
    chat("alice")  # the key again: a new session, another episode when it ends
    recorder.idle_s = 0.0
    recorder.tick()
    assert recorded(recorder) == [("alice", 2, 0.5), ("alice", 1, 0.0)]


def test_a_killed_servers_open_sessions_are_recovered_once(server, tokenizer):
    url, chat, recorder = server
    chat("alice")
    chat("bob")
    recorder.tick()  # both open: the snapshot holds both
    assert sorted(e.meta["session"] for e in read_episodes(recorder.snapshot_path)) == \
        ["alice", "bob"]
    reward(url, "alice", 1.0)  # alice ends after the snapshot; then the server is killed
    chat("bob")  # (and bob's second call never reached a snapshot)
    after = Recorder(recorder.path, Sessions())
    assert after.recover() == 1 and not after.snapshot_path.exists()
    assert recorded(after) == [("alice", 1, 1.0), ("bob", 1, 0.0)]
    assert after.recover() == 0


def test_the_end_of_the_with_writes_every_open_session(tokenizer, tmp_path):
    sessions = Sessions()
    completer = Completer(Scripted(tokenizer, ["5."] * 4), tokenizer, 512, 16)
    with Recorder(tmp_path / "r.jsonl", sessions, every_s=0.01) as recorder:
        with running(create_app(completer, sessions, "tiny", recorder=recorder)) as url:
            for key in ("a", "b"):
                openai.OpenAI(base_url=url, api_key=key, max_retries=0).chat.completions.create(
                    model="tiny", messages=USER)
    assert sorted(recorded(recorder)) == [("a", 1, 0.0), ("b", 1, 0.0)]
    assert not recorder.snapshot_path.exists()


@pytest.mark.parametrize("where, why", [("missing/r.jsonl", "does not exist"),
                                        (".", "is a directory"),
                                        ("/proc/r.jsonl", "cannot be written"),
                                        ("/dev/full", "not a regular file")])
def test_a_record_that_cannot_be_written_is_refused_at_once(tmp_path, where, why):
    """/proc and /dev/full pass an ``os.access`` check (as root) and then fail every write."""
    with pytest.raises(RecordError, match=why):
        Recorder(tmp_path / where, Sessions())
    assert list(tmp_path.iterdir()) == []
    Recorder(tmp_path / "r.jsonl", Sessions())
    assert list(tmp_path.iterdir()) == []  # the probe beside it is gone
