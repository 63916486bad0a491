"""Write a GSM8K-shaped dataset of addition word problems, procedurally (nothing is
downloaded): ``train.jsonl`` and ``test.jsonl`` (``question``, ``answer`` as GSM8K writes it,
a worked line then ``#### N``, and ``carries``, how many columns receive a carry) and
``sft.jsonl`` (OpenAI chat rows whose assistant turn works the sum in columns; a share
``--flawed`` of them comes from a student who never carries, so SFT alone stays below the
truth and RL has something to find).

    python examples/gsm8k_style/make_data.py data/gsm8k_style [--train 4000] [--test 200]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from posttrain.envs.arithmetic import Problem

NAMES = ("Ana", "Ben", "Cai", "Dee", "Eli", "Fay", "Gus", "Ivy")
ITEMS = ("apples", "books", "coins", "cards", "shells", "stamps")
TEMPLATES = (
    "{name} has {a} {item} and gets {b} more. How many {item} does {name} have?",
    "A box holds {a} {item} and another holds {b}. How many {item} are there in all?",
    "{name} found {a} {item} on Monday and {b} on Tuesday. How many {item} in total?",
)


def carries(a: int, b: int) -> int:
    """How many columns of ``a + b`` receive a carry (a carry out of the last column writes
    a new digit instead)."""
    count = carry = 0
    while a or b:
        count += carry
        carry = int(a % 10 + b % 10 + carry >= 10)
        a, b = a // 10, b // 10
    return count


def problem(rng: random.Random) -> tuple[str, Problem]:
    p = Problem(rng.randint(10, 99), "+", rng.randint(10, 99))
    text = rng.choice(TEMPLATES).format(name=rng.choice(NAMES), item=rng.choice(ITEMS),
                                        a=p.a, b=p.b)
    return text, p


def prompt_row(text: str, p: Problem) -> dict:
    return {"question": text, "answer": f"{p.a} + {p.b} = {p.answer}\n#### {p.answer}",
            "carries": carries(p.a, p.b)}


def sft_row(text: str, p: Problem, flawed: bool) -> dict:
    return {"messages": [{"role": "user", "content": text},
                         {"role": "assistant", "content": p.completion(flawed=flawed)}]}


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=4000, help="RL prompts")
    parser.add_argument("--test", type=int, default=200, help="held-out prompts")
    parser.add_argument("--sft", type=int, default=20000, help="SFT conversations")
    parser.add_argument("--flawed", type=float, default=0.6, help="share of flawed SFT answers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    test = [problem(rng) for _ in range(args.test)]
    seen = {t for t, _ in test}
    train = [pair for pair in (problem(rng) for _ in range(args.train + args.sft))
             if pair[0] not in seen]  # held-out questions never appear in training
    write(args.out / "test.jsonl", [prompt_row(t, p) for t, p in test])
    write(args.out / "train.jsonl", [prompt_row(t, p) for t, p in train[:args.train]])
    write(args.out / "sft.jsonl", [sft_row(t, p, rng.random() < args.flawed)
                                   for t, p in train[args.train:]])
    print(f"wrote {args.out}: {len(train[:args.train])} train, {len(test)} test prompts, "
          f"{len(train[args.train:])} SFT conversations")


if __name__ == "__main__":
    main()
