"""Quick instructions against separate requests, ``TorchEngine`` on the CPU: 64 held-out
prompts are answered (greedy, 32 new tokens) and two instruction tokens each are answered (8
new tokens) by continuing the KV cache (``generate_quick``) or by a separate request that
prefills the sequence again, at each point: after the prompt (``at=prompt``) and after the
completion (``at=completion``). Reported per point: prefill tokens for each way, seconds for
the whole work each way (``generate_quick``, against ``generate`` then the separate requests;
best of 3), and whether the answers agree. The prompts are the quickstart's
held-out ones, and the instructions ``<action>`` and ``<query>`` where the tokenizer has them
(a model trained on ``posttrain quick-data``), else ``<think>`` and ``<answer>`` as stand-ins:
the cost does not depend on what the answers mean. Prints JSON.

    python benchmarks/quick_instructions.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys
import time


def best_of(n: int, work) -> float:
    """The fastest of ``n`` timings of ``work()``, in seconds."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main(model_dir: str) -> None:
    from posttrain.config import load_config
    from posttrain.engines import TorchEngine
    from posttrain.models import encode_prompt, load_model, load_tokenizer
    from posttrain.recipes.run_tasks import RunTasks
    from posttrain.types import SamplingParams

    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    tasks = RunTasks(load_config("configs/quickstart.yaml")).eval_tasks[:64]
    prompts = [encode_prompt(tok, t.messages()) for t in tasks]
    names = ["<action>", "<query>"] if "<action>" in tok.get_vocab() else ["<think>", "<answer>"]
    quick = [tok.convert_tokens_to_ids(n) for n in names]
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    answer = SamplingParams(temperature=0.0, max_new_tokens=32)
    short = SamplingParams(temperature=0.0, max_new_tokens=8)
    engine.generate_quick(prompts[:2], answer, quick, 8)  # warm-up
    plain = engine.generate(prompts, answer)
    points = {}
    for at in ("prompt", "completion"):
        outs = engine.generate_quick(prompts, answer, quick, 8, at=at)
        asks = [o.output.prompt_ids + (o.output.token_ids if at == "completion" else []) + [q]
                for o in outs for q in quick]
        separate = engine.generate(asks, short)
        quick_s = best_of(3, lambda: engine.generate_quick(prompts, answer, quick, 8, at=at))
        separate_s = best_of(3, lambda: (engine.generate(prompts, answer),
                                         engine.generate(asks, short)))
        points[at] = {
            "completions_same_as_generate": [o.output for o in outs] == plain,
            "answers_same_as_separate_requests":
                [a for o in outs for a in o.answers] == [s.token_ids for s in separate],
            "prefill_tokens_quick": (1 if at == "prompt" else 2) * len(asks),
            "prefill_tokens_separate": sum(len(a) for a in asks),
            "prefill_tokens_saved": sum(o.prefill_saved for o in outs),
            "seconds_quick": round(quick_s, 3),
            "seconds_generate_then_separate": round(separate_s, 3)}
    print(json.dumps({"benchmark": "quick_instructions", "model": model_dir,
                      "conversations": len(prompts), "instructions": names, **points},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
