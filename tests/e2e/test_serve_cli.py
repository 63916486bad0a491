"""``posttrain serve MODEL --record FILE`` as a user runs it: a real uvicorn process answers the
official ``openai`` client, no way of stopping it loses an ended session, and ``posttrain
replay`` finds each recorded episode consistent with its conversation."""

import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import openai
import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.serve import Sessions
from posttrain.serve.recording import Recorder
from posttrain.types import read_episodes

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tiny_dir, port, *options):
    server = subprocess.Popen(
        [shutil.which("posttrain"), "serve", str(tiny_dir), "--port", str(port), "--name",
         "tiny", "--max-tokens", "8", *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            openai.OpenAI(base_url=url, api_key="a", max_retries=0).models.list()
            return server, url
        except openai.APIConnectionError:
            assert server.poll() is None and time.monotonic() < deadline, server.stdout.read()
            time.sleep(0.2)


def converse(url, key, turns=2):
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    messages = [{"role": "user", "content": f"Hello, I am {key}."}]
    for turn in range(turns):
        reply = client.chat.completions.create(model="tiny", messages=messages)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": f"Turn {turn + 2}."}]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_serve_keeps_every_session_however_it_is_stopped(tmp_path, tiny_dir, stop):
    """Ctrl-C and SIGTERM (docker stop, systemd) write every session and exit 0; after a
    SIGKILL the session that ended (its reward posted) is in the record, and the open one is
    in the snapshot the next server appends. Every recorded episode replays."""
    port, record = free_port(), tmp_path / "sessions.jsonl"
    server, url = start_server(tiny_dir, port, "--record", str(record), "--record-every", "0.2")
    try:
        converse(url, "alice")
        converse(url, "bob")
        urllib.request.urlopen(urllib.request.Request(
            f"{url}/sessions/alice/reward", data=b'{"reward": 1}', method="POST",
            headers={"Content-Type": "application/json"}))
        snapshot = record.with_name(record.name + ".open")
        deadline = time.monotonic() + 60  # a hang guard: the snapshot is due in 0.2 s
        while not (snapshot.exists() and [(e.meta["session"], e.meta["calls"])
                                          for e in read_episodes(snapshot)] == [("bob", 2)]):
            assert time.monotonic() < deadline  # (a snapshot between bob's calls has one)
            time.sleep(0.05)
    finally:
        server.send_signal(stop)
        output = server.communicate(timeout=60)[0]
    if stop == signal.SIGKILL:
        assert [e.meta["session"] for e in read_episodes(record)] == ["alice"]
        assert Recorder(record, Sessions()).recover() == 1
    else:
        assert server.returncode == 0, output
        assert f"stopped by {stop.name}" in output and "recorded 2 sessions" in output
    episodes = list(read_episodes(record))
    assert [e.meta["session"] for e in episodes] == ["alice", "bob"]
    assert all(e.meta["calls"] == 2 for e in episodes) and episodes[0].reward == 1.0
    result = CliRunner().invoke(app, ["replay", str(record), "--model", str(tiny_dir)])
    assert result.exit_code == 0 and "2 of 2 episodes consistent" in result.output, \
        result.output


def test_a_bad_record_path_or_a_taken_port_fails_at_start(tmp_path, tiny_dir):
    missing = tmp_path / "no-such-dir" / "r.jsonl"
    result = CliRunner().invoke(app, ["serve", str(tiny_dir), "--record", str(missing)])
    assert result.exit_code == 2 and "does not exist" in result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", str(tiny_dir), "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "serving" not in result.output


ASYNC = ["rl.mode=async", "rl.async.max_staleness=1", "rl.async.partial_rollout=true"]


@pytest.mark.parametrize("agent,mode", [("agent.py", []), ("agents_sdk_agent.py", []),
                                        ("agent.py", ASYNC)],
                         ids=["plain-openai-client", "openai-agents-sdk", "async"])
def test_rl_trains_an_external_agent_through_the_server(tmp_path, agent, mode):
    """``agent.external``: an example agent (the plain ``openai`` client with a calculator
    tool, or the same agent on the OpenAI Agents SDK, its own tool loop over the Responses
    API) plays every sample of two RL steps against the server, synchronous or asynchronous;
    nothing in it knows about posttrain, and its sessions are the episodes the steps train
    on, each of which ``posttrain replay`` re-renders token for token."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "stages=[rl]",
        "model.preset=nano", "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2",
        "rl.eval_every=0", "eval.num_problems=2", "rl.save_episodes=true", "threads=1",
        f"agent.external=examples/external_agent/{agent}:solve", *mode])
    assert result.exit_code == 0, result.output
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 2 * 2 * 2
    assert all(e.meta["calls"] >= 1 and e.meta["session"].startswith("pt-") for e in episodes)
    assert all(v >= 0 for e in episodes for s in e.segments
               for v, m in zip(s.versions, s.loss_mask) if m)
    replayed = CliRunner().invoke(app, ["replay", str(out / "episodes.jsonl"), "--model",
                                        str(out / "rl_model")])
    assert replayed.exit_code == 0 and "8 of 8 episodes consistent" in replayed.output, \
        replayed.output
