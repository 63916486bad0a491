"""The GPU check's ``tinker`` section: ``posttrain tinker-serve``'s service with its model and
engine on the device, driven over HTTP by the unmodified ``tinker`` SDK.

A rank-32 LoRA training client takes supervised steps (``cross_entropy``) on a fixed batch of
random tokens: the mean loss a token before and after, and the update's tokens/s after a
warm-up step. Its sampler (the adapter merged into the engine) then scores one datum, against
the trainer's own log-probs (fp32 on both sides: kernel rounding only), and samples 8
completions of 128 tokens (tokens/s). Reports the device's peak memory.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from posttrain.serve.server import running
from posttrain.tinker_api.app import create_app
from posttrain.tinker_api.service import Service


def datum(tokens: list[int]):
    from tinker import types

    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:],
                                       "weights": [1.0] * (len(tokens) - 1)})


def tinker_section(device: torch.device, model_dir: Path, vocab: int, tiny: bool,
                   tmp: Path) -> dict:
    import tinker
    from tinker import types

    os.environ["TINKER_TELEMETRY"] = "0"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows, length, steps, new_tokens = (4, 32, 3, 16) if tiny else (8, 512, 6, 128)
    g = torch.Generator().manual_seed(0)
    data = [datum(torch.randint(8, vocab, (length + 1,), generator=g).tolist())
            for _ in range(rows)]
    service = Service(model_dir, "policy", tmp / "tinker_checkpoints", device=str(device))
    out: dict = {"rows": rows, "tokens_a_row": length, "lora_rank": 32}
    with running(create_app(service)) as url:
        client = tinker.ServiceClient(base_url=url.removesuffix("/v1"), api_key="tml-check")
        tc = client.create_lora_training_client(base_model="policy", rank=32, seed=0).result()
        losses, seconds = [], []
        for _ in range(steps):
            start = time.perf_counter()
            fb = tc.forward_backward(data, "cross_entropy")
            step = tc.optim_step(types.AdamParams(learning_rate=1e-3))
            losses.append(fb.result().metrics["loss:sum"] / (rows * length))
            step.result()
            seconds.append(time.perf_counter() - start)
        out |= {"loss_a_token_first": losses[0], "loss_a_token_last": losses[-1],
                "update_tokens_per_s": rows * length / statistics.median(seconds[1:])}
        trained = tc.forward(data[:1], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
        sampler = tc.save_weights_and_get_sampling_client().result()
        first = data[0]
        tokens = first.model_input.to_ints() + first.loss_fn_inputs["target_tokens"].tolist()[-1:]
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        gap = torch.tensor(scored[1:]) - torch.tensor(trained.tolist())
        out |= {"sampler_vs_trainer_max": float(gap.abs().max()),
                "largest_logprob": float(torch.tensor(scored[1:]).abs().max())}
        prompt = types.ModelInput.from_ints(tokens[:32])
        start = time.perf_counter()
        sampled = sampler.sample(prompt, num_samples=8, sampling_params=types.SamplingParams(
            max_tokens=new_tokens, temperature=1.0, seed=0)).result()
        made = sum(len(s.tokens) for s in sampled.sequences)
        out |= {"sampled_tokens": made, "sample_tokens_per_s": made / (time.perf_counter() - start)}
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out
