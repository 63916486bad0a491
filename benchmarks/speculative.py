"""Speculative decoding with an MTP head against plain decoding, ``TorchEngine`` on the CPU.

For each preset (micro, small) the quickstart's SFT stage runs with ``trainer.mtp`` (the head
learns ``mtp_self_distill`` beside the model), unless ``--models`` names trained model
directories. Then 64 held-out quickstart prompts are decoded greedily and at temperature 1,
in one batch of 64 and one prompt at a time, plainly and with ``k`` drafts a round. Reported:
tokens/s, the speed-up, the draft acceptance rate, tokens per main-model forward of a row,
and (greedy) whether every completion equals plain decoding's. Prints JSON.

    python benchmarks/speculative.py [--presets micro small] [--models DIR ...] [--ks 1 2 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS, NEW_TOKENS, SINGLE = 64, 48, 16


def trained(preset: str, root: Path) -> Path:
    """The quickstart's SFT stage on ``preset`` with ``trainer.mtp``: its model directory."""
    out = root / preset
    subprocess.run([sys.executable, "-c", "from posttrain.cli.app import main; main()",
                    "train", "configs/quickstart.yaml",
                    "stages=[sft]", f"model.preset={preset}", "trainer.mtp={}",
                    "eval.num_problems=10", f"out_dir={out}"], check=True,
                   stdout=subprocess.DEVNULL)
    return out / "sft_model"


def timed(engine, prompts, sampling, one_at_a_time: bool):
    """``(outputs, tokens per second)``."""
    start = time.perf_counter()
    outs = [o for p in prompts for o in engine.generate([p], sampling)] if one_at_a_time \
        else engine.generate(prompts, sampling)
    seconds = time.perf_counter() - start
    return outs, sum(len(o.token_ids) for o in outs) / seconds


def measure(model_dir: Path, ks: list[int]) -> list[dict]:
    from posttrain.config import load_config
    from posttrain.engines import TorchEngine
    from posttrain.models import encode_prompt, load_model, load_tokenizer
    from posttrain.models.mtp import MTPHead
    from posttrain.recipes.run_tasks import RunTasks
    from posttrain.types import SamplingParams

    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    head = MTPHead.load(model_dir)
    tasks = RunTasks(load_config("configs/quickstart.yaml")).eval_tasks[:PROMPTS]
    prompts = [encode_prompt(tok, t.messages()) for t in tasks]
    rows = []
    for temperature in (0.0, 1.0):
        sampling = SamplingParams(temperature=temperature, max_new_tokens=NEW_TOKENS, seed=3)
        for single in (False, True):
            batch = prompts[:SINGLE] if single else prompts
            plain = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
            plain.generate(batch[:2], sampling)  # warm-up
            base, base_speed = timed(plain, batch, sampling, single)
            for k in ks:
                engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id, draft=head,
                                     draft_tokens=k)
                engine.generate(batch[:2], sampling)
                engine.speculative.__init__()  # count the measured calls only
                outs, speed = timed(engine, batch, sampling, single)
                stats = engine.speculative
                rows.append({
                    "temperature": temperature, "batch": 1 if single else len(batch), "k": k,
                    "plain_tokens_per_s": round(base_speed), "tokens_per_s": round(speed),
                    "speedup": round(speed / base_speed, 3),
                    "acceptance_rate": round(stats.acceptance_rate, 3),
                    "tokens_per_forward": round(stats.tokens_per_forward, 3),
                    **({"same_as_plain": all(a.token_ids == b.token_ids
                                             for a, b in zip(base, outs))}
                       if temperature == 0 else {})})
                print(json.dumps({"model": str(model_dir), **rows[-1]}), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["micro", "small"])
    parser.add_argument("--models", nargs="+", type=Path)
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 2, 3])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        models = args.models or [trained(p, Path(root)) for p in args.presets]
        names = [str(m) for m in args.models] if args.models else args.presets
        result = {name: measure(m, args.ks) for name, m in zip(names, models)}
    print(json.dumps({"benchmark": "speculative", "prompts": PROMPTS,
                      "new_tokens": NEW_TOKENS, "models": result}, indent=1))


if __name__ == "__main__":
    main()
