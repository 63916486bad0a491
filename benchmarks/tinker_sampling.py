"""Concurrent sampling on ``posttrain tinker-serve``: ``--requests`` sample requests sent at
once by the unmodified ``tinker`` SDK to one sampler (the base weights) of a tiny model, each
of one sequence of ``--tokens`` tokens (EOS does not end it: ``stop=[]``, and no EOS in the
engine, as the server had one before it took ``stop=[]``), its own prompt and seed. Prints JSON: the wall time until all answered, the tokens sampled, tokens/s, each
request's latency, the engine calls and their rows (how the server batched them), and the
machine's load average at the start.

    python benchmarks/tinker_sampling.py [--requests 6] [--tokens 500] [--preset micro]

To compare with older code, run this file with that code first on the path
(``PYTHONPATH=/path/to/old/src python benchmarks/tinker_sampling.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from posttrain.models import build_tiny
from posttrain.serve.server import running
from posttrain.tinker_api.app import create_app
from posttrain.tinker_api.service import Service


def counted(engine) -> list[int]:
    """The rows of each of ``engine``'s ``generate`` calls from now on."""
    rows, generate = [], engine.generate

    def spy(prompts, sampling, seeds=None):
        rows.append(len(prompts))
        return generate(prompts, sampling, seeds)
    engine.generate = spy
    return rows


def measure(url: str, requests: int, tokens: int, tokenizer) -> dict:
    """Send the requests at once; wall time, tokens and latencies once all are answered."""
    import tinker
    from tinker import types

    sampler = tinker.ServiceClient(base_url=url, api_key="tml-bench").create_sampling_client(
        base_model="tiny").result()
    sampler.sample(types.ModelInput.from_ints(tokenizer.encode("warm up")), num_samples=1,
                   sampling_params=types.SamplingParams(max_tokens=4, seed=0)).result()
    start = time.perf_counter()
    futures = [sampler.sample(types.ModelInput.from_ints(tokenizer.encode(f"What is {i}+{i}?")),
                              num_samples=1, sampling_params=types.SamplingParams(
                                  max_tokens=tokens, seed=i, stop=[]))
               for i in range(requests)]
    latencies, sampled = [], 0
    for f in futures:
        sampled += len(f.result().sequences[0].tokens)
        latencies.append(time.perf_counter() - start)
    wall = time.perf_counter() - start
    return {"wall_s": round(wall, 2), "sampled_tokens": sampled,
            "tokens_per_s": round(sampled / wall, 1),
            "latency_s": {"median": round(statistics.median(latencies), 2),
                          "max": round(max(latencies), 2)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--preset", default="micro")
    args = parser.parse_args()
    os.environ["TINKER_TELEMETRY"] = "0"
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny(Path(tmp) / "model", args.preset, max_positions=args.tokens + 64)
        service = Service(model, "tiny", Path(tmp) / "checkpoints")
        service.engine.eos_token_id = None  # code before stop=[] stops at EOS: the same work
        rows = counted(service.engine)
        with running(create_app(service)) as url:
            result = measure(url.removesuffix("/v1"), args.requests, args.tokens,
                             service.tokenizer)
    print(json.dumps({"requests": args.requests, "tokens_a_request": args.tokens,
                      "preset": args.preset, **result, "engine_call_rows": rows[1:],
                      "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                      "load_average_1_5_15": [round(x, 2) for x in load]}))


if __name__ == "__main__":
    main()
