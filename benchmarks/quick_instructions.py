"""Quick instructions against separate requests, ``TorchEngine`` on the CPU: 64 held-out
quickstart prompts are answered (greedy, 32 new tokens), then two instruction tokens each are
answered (8 new tokens) by continuing the KV cache (``generate_quick``) or by a separate
request that prefills the conversation again. Reported: prefill tokens and seconds of the
instruction phase for each, and whether the answers agree. The instruction tokens here are
ordinary ids of the vocabulary: the model was not trained on them, so the answers mean
nothing; the cost does not depend on that. Prints JSON.

    python benchmarks/quick_instructions.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys
import time


def main(model_dir: str) -> None:
    from posttrain.config import load_config
    from posttrain.engines import TorchEngine
    from posttrain.models import encode_prompt, load_model, load_tokenizer
    from posttrain.recipes.run_tasks import RunTasks
    from posttrain.types import SamplingParams

    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    tasks = RunTasks(load_config("configs/quickstart.yaml")).eval_tasks[:64]
    prompts = [encode_prompt(tok, t.messages()) for t in tasks]
    quick = [tok.convert_tokens_to_ids("<think>"), tok.convert_tokens_to_ids("<answer>")]
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    answer = SamplingParams(temperature=0.0, max_new_tokens=32)
    short = SamplingParams(temperature=0.0, max_new_tokens=8)
    engine.generate_quick(prompts[:2], answer, quick, 8)  # warm-up
    start = time.perf_counter()
    plain = engine.generate(prompts, answer)
    answered = time.perf_counter() - start
    start = time.perf_counter()
    outs = engine.generate_quick(prompts, answer, quick, 8)
    quick_s = time.perf_counter() - start - answered  # the instruction phase alone
    asks = [o.output.prompt_ids + o.output.token_ids + [q] for o in outs for q in quick]
    start = time.perf_counter()
    separate = engine.generate(asks, short)
    separate_s = time.perf_counter() - start
    same = [a for o in outs for a in o.answers] == [s.token_ids for s in separate]
    print(json.dumps({
        "benchmark": "quick_instructions", "model": model_dir, "conversations": len(prompts),
        "instructions_each": len(quick),
        "completions_same_as_generate": [o.output for o in outs] == plain,
        "answers_same_as_separate_requests": same,
        "prefill_tokens_quick": 2 * len(asks),
        "prefill_tokens_separate": sum(len(a) for a in asks),
        "prefill_tokens_saved": sum(o.prefill_saved for o in outs),
        "instruction_phase_s_quick": round(quick_s, 3),
        "instruction_phase_s_separate": round(separate_s, 3)}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
