"""Weight sync to a Ray engine actor: the object store against the gloo collective
(``dist.weight_transport``). Prints JSON.

For each model (the ``small`` preset, then Llama models of ``--hidden`` x ``--layers`` built
with random weights) and each transport: one torch engine actor (colocated) on a local Ray
cluster, ``--syncs`` syncs of freshly perturbed weights through ``sync_weights`` (send, then
the checksum check; no probes). Per sync: seconds, and the peak resident memory above the
sync's starting point of the driver and of the actor (sampled every 5 ms; the object store's
shared memory counts where a process maps it). Bytes per sync are the weights' bytes (every
tensor, every sync). The collective runs twice: with ``dist.max_restarts`` 3 (the default: the
driver keeps a host copy of the last weights to restore a restarted actor) and 0 (no copy).
With ``sleep`` (``engine.sleep``, the colocated refit) the engine frees its weights before each
sync, which wakes it: the memory the sleep gave back, and the refit's peak above the asleep
actor.

    python benchmarks/weight_sync.py [--hidden 512 1024] [--layers 8] [--syncs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch

from posttrain.cluster import close_engines, launch_engines, ray_session
from posttrain.config import DistConfig, OptimConfig
from posttrain.models import build_tiny, load_model, load_tokenizer
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.train import Trainer

VARIANTS = [("object_store", 3, False), ("collective", 3, False), ("collective", 0, False),
            ("object_store", 3, True), ("collective", 0, True)]


class PeakRSS:
    """The largest RSS of each process while inside the block, above its value at entry."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {k: psutil.Process(p) for k, p in pids.items()}
        self.base = {k: p.memory_info().rss for k, p in self.procs.items()}
        self.peak = dict(self.base)
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            for k, p in self.procs.items():
                self.peak[k] = max(self.peak[k], p.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> dict[str, float]:
        return {k: (self.peak[k] - self.base[k]) / 2**20 for k in self.procs}


def llama_dir(root: Path, hidden: int, layers: int) -> Path:
    """A Llama of ``hidden`` x ``layers`` with random weights and the micro preset's
    tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    micro = build_tiny(root / "micro", "micro", seed=0)
    out = root / f"llama-{hidden}x{layers}"
    tokenizer = load_tokenizer(micro)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         intermediate_size=4 * hidden, max_position_embeddings=512,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def measure(model_dir: Path, transport: str, restarts: int, syncs: int,
            sleep: bool = False) -> dict:
    tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
    dist = DistConfig(backend="ray", weight_transport=transport, max_restarts=restarts)
    (engine,) = launch_engines(dist, model_dir, "float32", tokenizer.pad_token_id,
                               tokenizer.eos_token_id)
    trainer = Trainer(model, OptimConfig(), 1)
    pids = {"driver": psutil.Process().pid,
            "actor": engine._ray.get(engine.actor.pid.remote())}
    seconds, driver, actor, freed = [], [], [], []
    for version in range(1, syncs + 1):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3)
        if sleep:  # the engine frees its weights (an update would run now), the sync wakes it
            awake = rss_mib(pids["actor"])
            engine.sleep()
            freed.append(awake - rss_mib(pids["actor"]))
        with PeakRSS(pids) as rss:
            start = time.perf_counter()
            sync_weights(trainer, engine, version)
            seconds.append(time.perf_counter() - start)
        driver.append(rss.mib()["driver"])
        actor.append(rss.mib()["actor"])
    close_engines([engine])
    weight_bytes = sum(t.numel() * t.element_size() for _, t in trainer.named_weights())
    return {"transport": transport, "max_restarts": restarts, "sleep": sleep,
            **({"actor_freed_by_sleep_mib": statistics.median(freed)} if sleep else {}),
            "weights_mib": weight_bytes / 2**20,
            "seconds_median": statistics.median(seconds), "seconds": seconds,
            "driver_peak_mib": max(driver), "actor_peak_mib": max(actor),
            "bytes_per_sync": weight_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="*", default=[512, 1024])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--syncs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ray_session(DistConfig(backend="ray"),
                                                           num_cpus=2):
        root = Path(tmp)
        models = [("small", build_tiny(root / "small", "small", seed=0))]
        models += [(f"llama-{h}x{args.layers}", llama_dir(root, h, args.layers))
                   for h in args.hidden]
        for name, model_dir in models:
            for transport, restarts, sleep in VARIANTS:
                rows.append({"model": name} | measure(model_dir, transport, restarts,
                                                      args.syncs, sleep))
                print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"benchmark": "weight_sync", "cpus": psutil.cpu_count(),
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
