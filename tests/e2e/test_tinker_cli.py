"""``posttrain tinker-serve MODEL`` as a user starts it: the unmodified SDK trains a step and
samples through it with the server's API key, and a client with another key is refused."""

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import tinker
from tests.e2e.test_serve_cli import free_port
from tinker import types

pytestmark = pytest.mark.slow


def start_tinker_serve(model, *options) -> tuple[subprocess.Popen, str, int]:
    """``posttrain tinker-serve MODEL`` on a free port, once it answers: the process, its URL
    and the status of its health route (401 when it wants a key)."""
    port = free_port()
    server = subprocess.Popen([shutil.which("posttrain"), "tinker-serve", str(model), "--port",
                               str(port), *options],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            return server, url, urllib.request.urlopen(f"{url}/api/v1/healthz",
                                                       timeout=2).status
        except urllib.error.HTTPError as e:
            return server, url, e.code
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, server.stdout.read()
            time.sleep(0.2)


def test_tinker_serve_trains_and_samples_for_the_sdk(tiny_dir, tmp_path):
    key = "tml-secret"
    server, url, health = start_tinker_serve(tiny_dir, "--name", "tiny", "--api-key", key,
                                             "--checkpoints", str(tmp_path / "ckpt"))
    assert health == 401  # up, and the health route wants the key too
    try:
        os.environ["TINKER_TELEMETRY"] = "0"
        sc = tinker.ServiceClient(base_url=url, api_key=key)
        tc = sc.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
        ids = tc.get_tokenizer().encode("What is 2+3? 5")
        datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                            loss_fn_inputs={"target_tokens": ids[1:],
                                            "weights": [1.0] * (len(ids) - 1)})
        assert tc.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"] > 0
        tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        path = tc.save_weights_for_sampler("first").result().path
        assert (tmp_path / "ckpt").is_dir() and path.endswith("/sampler_weights/first")
        sampler = sc.create_sampling_client(model_path=path).result()
        out = sampler.sample(types.ModelInput.from_ints(ids[:3]), num_samples=2,
                             sampling_params=types.SamplingParams(max_tokens=4, seed=0)).result()
        assert len(out.sequences) == 2 and all(
            len(s.tokens) == 4 or s.stop_reason == "stop" for s in out.sequences)
        with pytest.raises(Exception, match="401|X-API-Key"):
            tinker.ServiceClient(base_url=url, api_key="tml-wrong") \
                .create_lora_training_client(base_model="tiny", rank=4).result()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
