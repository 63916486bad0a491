"""``posttrain serve MODEL --record FILE`` as a user runs it: a real uvicorn process answers the
official ``openai`` client, Ctrl-C writes every session's episode, and ``posttrain replay``
finds each consistent with its conversation."""

import shutil
import signal
import socket
import subprocess
import time

import openai
import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.types import read_episodes

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_records_sessions_that_replay(tmp_path, tiny_dir):
    port, record = free_port(), tmp_path / "sessions.jsonl"
    server = subprocess.Popen(
        [shutil.which("posttrain"), "serve", str(tiny_dir), "--port", str(port), "--name",
         "tiny", "--max-tokens", "8", "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                openai.OpenAI(base_url=url, api_key="a", max_retries=0).models.list()
                break
            except openai.APIConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    server.stdout.read()
                time.sleep(0.2)
        for key in ("alice", "bob"):
            client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
            messages = [{"role": "user", "content": f"Hello, I am {key}."}]
            for turn in range(2):
                reply = client.chat.completions.create(model="tiny", messages=messages)
                messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                             {"role": "user", "content": f"Turn {turn + 2}."}]
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=60)[0]
    assert server.returncode == 0, output
    episodes = list(read_episodes(record))
    assert sorted(e.meta["session"] for e in episodes) == ["alice", "bob"]
    assert all(e.meta["calls"] == 2 for e in episodes)
    result = CliRunner().invoke(app, ["replay", str(record), "--model", str(tiny_dir)])
    assert result.exit_code == 0 and "2 of 2 episodes consistent" in result.output, \
        result.output


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
