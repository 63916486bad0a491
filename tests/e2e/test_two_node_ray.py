"""A Ray cluster of two nodes on one machine, as `ray start` makes one on two (docs/scaling.md):
a head and a second node of one CPU each. Spread engines take one node each and generate what
an in-process engine does; a run against the cluster (``dist.address``) ends at the weights of
the same run on a local Ray session.

The drivers that join the cluster run in processes of their own: Ray keeps a process's first
authentication mode, so a test worker that earlier started a local cluster (token
authentication) had its actors on this cluster (none) cancelled before they ran. Opt-in
(``--multinode``): it adds about a minute to the whole suite."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_scaling_cli import SMALL, assert_same_weights, run

pytestmark = [pytest.mark.slow, pytest.mark.multinode]
ray = pytest.importorskip("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(log: Path, *args: str) -> subprocess.Popen:
    """A node started by ``ray start --block``: its processes end with it, and other Ray
    sessions on the machine (other test workers') are left alone. Token authentication, which
    ``ray start`` turns on, is off: one machine, one user."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen([shutil.which("ray"), "start", "--block", "--num-cpus=1",
                             "--node-ip-address=127.0.0.1", "--disable-usage-stats", *args],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_for(nodes: int, address: str, logs: list[Path], timeout_s: float = 180) -> None:
    """Until the cluster has ``nodes`` alive, asked from a process of its own (this one may
    hold another test's session)."""
    ask = ("import ray; ray.init(address=%r, log_to_driver=False, configure_logging=False); "
           "print(sum(n['Alive'] for n in ray.nodes()))" % address)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True,
                             timeout=timeout_s)
        if out.returncode == 0 and out.stdout.split()[-1:] == [str(nodes)]:
            return
        time.sleep(1)
    said = "\n".join(f"{log.name}: {log.read_text()[-1500:]}" for log in logs)
    raise TimeoutError(f"the Ray cluster at {address} did not reach {nodes} nodes:\n{said}")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The address of a cluster of a head and a second node, one CPU each; stopped after."""
    if ray.is_initialized():  # a session an earlier test in this process left
        ray.shutdown()
    address, logs = f"127.0.0.1:{free_port()}", tmp_path_factory.mktemp("ray_logs")
    head, second = logs / "head.log", logs / "second.log"
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live under it
    nodes = [start_node(head, "--head", f"--port={address.split(':')[1]}",
                        f"--temp-dir={temp}", "--include-dashboard=false")]
    try:
        wait_for(1, address, [head])
        nodes.append(start_node(second, f"--address={address}"))
        wait_for(2, address, [head, second])
        yield address
    finally:
        for node in reversed(nodes):
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)


def spread_engines_check(address: str, tmp: str) -> None:
    """Two spread engines on the cluster at ``address``: a node each, an in-process engine's
    tokens (run by ``joined`` in a process of its own)."""
    from posttrain.cluster.launch import close_engines, launch_engines, ray_session
    from posttrain.config import DistConfig
    from posttrain.engines import TorchEngine
    from posttrain.models import build_tiny, encode_prompt, load_model, load_tokenizer
    from posttrain.types import SamplingParams

    model_dir = build_tiny(Path(tmp) / "tiny", "nano", seed=0)
    tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
    cfg = DistConfig(backend="ray", address=address, engines=2, placement="disaggregated",
                     engine_strategy="spread", placement_timeout_s=60)
    prompts = [encode_prompt(tokenizer, [{"role": "user", "content": f"What is {i}+2?"}])
               for i in range(2)]
    sampling = SamplingParams(max_new_tokens=4)
    local = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    with ray_session(cfg):
        assert len({n["NodeID"] for n in ray.nodes() if n["Alive"]}) == 2
        remote = launch_engines(cfg, model_dir, "float32", tokenizer.pad_token_id,
                                tokenizer.eos_token_id)
        try:
            (group,) = {ray.get(e.actor.placement_group.remote()) for e in remote}
            table = ray.util.placement_group_table()[group]
            assert table["strategy"] == "SPREAD"
            assert len(set(table["bundles_to_node_id"].values())) == 2  # a node an engine
            for engine in remote:
                assert engine.generate(prompts, sampling, [3, 4]) == \
                    local.generate(prompts, sampling, [3, 4])
        finally:
            close_engines(remote)


def joined(*command: str) -> None:
    """``command`` in a process of its own, its environment without token authentication
    (the cluster's nodes have none); fails with its output when it does."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


def test_spread_engines_take_a_node_each_and_generate_as_in_process(two_nodes, tmp_path):
    joined(sys.executable, "-c", "import test_two_node_ray as t; "
           f"t.spread_engines_check({two_nodes!r}, {str(tmp_path)!r})")


def test_a_run_on_the_two_node_cluster_ends_at_the_local_ray_runs_weights(two_nodes, tmp_path):
    """Async at staleness 0 on two engines, one a node: the trainer stays in the driver and
    the engines only sample (counter-based seeds: the same tokens wherever they run), so the
    weights are those of the same run on a local Ray session, bit for bit."""
    from safetensors.torch import load_file

    ray_async = ["rl.mode=async", "rl.async.max_staleness=0", "dist.backend=ray",
                 "dist.engines=2"]
    out = tmp_path / "cluster"
    joined(shutil.which("posttrain"), "train", "configs/quickstart.yaml", f"out_dir={out}",
           *SMALL, *ray_async, f"dist.address={two_nodes}", "dist.placement=disaggregated",
           "dist.engine_strategy=spread")
    on_cluster = load_file(out / "rl_model" / "model.safetensors")
    assert_same_weights(run(tmp_path, "local", *ray_async), on_cluster, exact=True)
