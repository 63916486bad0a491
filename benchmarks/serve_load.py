"""Load on ``posttrain serve``: many agent sessions at once against one server. Prints JSON.

``--sessions`` threads each hold a conversation of ``--turns`` turns through the official
``openai`` client (a new user message a turn, the reply kept), all against one server on one
``TorchEngine`` (the tiny model, or ``--model``). Reported: requests, HTTP errors, turns lost
or mixed up (a session's recording holds a turn of another, misses one of its own, or fails
``posttrain replay``'s check), latency percentiles, requests/s and sampled tokens/s over the
run, and the rows of each engine call (how much the batcher shared).

    python benchmarks/serve_load.py [--sessions 64] [--turns 8] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import openai
import torch

from posttrain.engines import TorchEngine
from posttrain.harness import episode_problems
from posttrain.models import build_tiny, load_model, load_tokenizer
from posttrain.serve import Completer, Sessions, create_app, running


def session(url: str, key: str, turns: int, max_tokens: int, latencies: list[float],
            errors: list[str]) -> None:
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=600)
    messages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"{key} turn {turn}"})
        start = time.perf_counter()
        try:
            reply = client.chat.completions.create(model="tiny", messages=messages,
                                                   max_tokens=max_tokens)
        except openai.APIError as exc:
            errors.append(f"{key} turn {turn}: {exc}")
            return
        latencies.append(time.perf_counter() - start)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--model", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or build_tiny(Path(tmp) / "micro", "micro")
        tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
        engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
        sessions = Sessions()
        completer = Completer(engine, tokenizer, model.config.max_position_embeddings,
                              args.max_tokens)
        keys = [f"session-{i}" for i in range(args.sessions)]
        latencies: list[float] = []
        errors: list[str] = []
        with running(create_app(completer, sessions, "tiny")) as url:
            start = time.perf_counter()
            threads = [threading.Thread(target=session, args=(
                url, k, args.turns, args.max_tokens, latencies, errors)) for k in keys]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - start
    lost = []
    sampled = 0
    for i, key in enumerate(keys):
        episode = sessions.episode(key)
        text = "".join(tokenizer.decode(s.token_ids) for s in episode.segments)
        sampled += sum(sum(s.loss_mask) for s in episode.segments)
        if (episode.meta["calls"] != args.turns or episode_problems(episode, tokenizer)
                or any(f"{key} turn {t}" not in text for t in range(args.turns))
                or any(f"session-{j} " in text for j in range(args.sessions) if j != i)):
            lost.append(key)
    q = statistics.quantiles(latencies, n=100)
    print(json.dumps({
        "sessions": args.sessions, "turns": args.turns, "max_tokens": args.max_tokens,
        "requests": len(latencies), "errors": len(errors), "sessions_lost_or_mixed": len(lost),
        "latency_s": {"p50": q[49], "p95": q[94], "max": max(latencies)},
        "requests_per_s": len(latencies) / seconds, "sampled_tokens_per_s": sampled / seconds,
        "engine_calls": completer.batcher.engine_calls,
        "rows_per_engine_call": {
            "mean": completer.batcher.rows / completer.batcher.engine_calls,
            "max": completer.batcher.most_rows},
        "seconds": seconds, "torch_threads": torch.get_num_threads()}, indent=2))


if __name__ == "__main__":
    main()
