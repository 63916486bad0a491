"""The student's log-prob gap to a teacher with another tokenizer, on held-out text.

The teacher answers held-out arithmetic prompts greedily; each model scores that text after
the prompt in its own chat template and tokenization (the chain rule makes the two totals
the same event), and the gap is ``(log P_teacher - log P_student) / characters``, averaged
over the prompts. Prints JSON (one entry a student).

    python benchmarks/cross_tokenizer_gap.py TEACHER STUDENT [STUDENT ...] --prompts 50
"""

from __future__ import annotations

import argparse
import json

from posttrain.engines import TorchEngine
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.models import encode_prompt, load_model, load_tokenizer
from posttrain.recipes.distillation.teachers import Teacher
from posttrain.types import SamplingParams


def text_logprob(teacher: Teacher, tokenizer, messages: list[dict], text: str) -> float:
    """``log P(text + end of turn | prompt)`` under ``teacher`` with its own ``tokenizer``."""
    prompt = encode_prompt(tokenizer, messages)
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return sum(teacher.score([prompt + ids], tokenizer.pad_token_id)[0][len(prompt):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher")
    parser.add_argument("students", nargs="+")
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    t_tok = load_tokenizer(args.teacher)
    t_model = load_model(args.teacher)
    engine = TorchEngine(t_model, t_tok.pad_token_id, t_tok.eos_token_id)
    tasks = ArithmeticTasks().eval_set(args.prompts)
    outs = engine.generate([encode_prompt(t_tok, t.messages()) for t in tasks],
                           SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0,
                                          stop_token_ids=(t_tok.eos_token_id,)))
    texts = [t_tok.decode([i for i in o.token_ids if i != t_tok.eos_token_id],
                          clean_up_tokenization_spaces=False) for o in outs]
    teacher = Teacher("teacher", model=t_model)
    reference = [text_logprob(teacher, t_tok, t.messages(), x) for t, x in zip(tasks, texts)]
    report = {"teacher": args.teacher, "prompts": len(tasks),
              "characters": sum(map(len, texts)), "students": {}}
    for path in args.students:
        tok = load_tokenizer(path)
        student = Teacher("student", model=load_model(path))
        gaps = [(ref - text_logprob(student, tok, t.messages(), x)) / max(len(x), 1)
                for t, x, ref in zip(tasks, texts, reference)]
        report["students"][path] = {"gap_per_char": round(sum(gaps) / len(gaps), 4),
                                    "same_vocabulary": tok.get_vocab() == t_tok.get_vocab()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
