"""Write small Harbor tasks (the task format of the harbor framework) for
``examples/harbor/generated.yaml``: each asks for one shell action in the working directory,
with a test that writes ``/logs/verifier/reward.txt`` and a reference solution. Three kinds,
with names and words drawn at random: write a file, copy a file, count a file's lines.

    python examples/harbor/make_tasks.py runs/harbor_tasks --count 60
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "ocean", "piano", "lemon",
         "eagle", "amber", "cedar", "delta", "ember", "flint", "grove", "harbor", "ivory")
TOML = "version = \"1.0\"\n\n[verifier]\ntimeout_sec = 30.0\n"
CHECK = """#!/bin/bash
if [ "$(cat /app/{file} 2>/dev/null)" = "{expected}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def task(kind: str, rng: random.Random) -> dict[str, str]:
    """The files of one task (relative path -> text)."""
    name, word = rng.sample(WORDS, 2)
    dockerfile = "FROM ubuntu:24.04\nWORKDIR /app\n"
    files = {}
    if kind == "write":
        instruction = f"Create a file named {name}.txt that contains the word {word}."
        solution, check = f"echo {word} > {name}.txt", CHECK.format(file=f"{name}.txt",
                                                                      expected=word)
    elif kind == "copy":
        instruction = f"Copy the file {name}.txt to {word}.txt."
        dockerfile += f"COPY {name}.txt /app/{name}.txt\n"
        files[f"environment/{name}.txt"] = f"{rng.choice(WORDS)}\n"
        solution = f"cp {name}.txt {word}.txt"
        check = CHECK.format(file=f"{word}.txt", expected="$(cat /app/" + f"{name}.txt)")
    else:
        lines = rng.randint(2, 9)
        instruction = f"Write the number of lines of {name}.txt into count.txt."
        dockerfile += f"COPY {name}.txt /app/\n"
        files[f"environment/{name}.txt"] = "".join(f"{rng.choice(WORDS)}\n"
                                                   for _ in range(lines))
        solution = f"wc -l < {name}.txt > count.txt"
        check = CHECK.format(file="count.txt", expected=str(lines))
    return {**files, "instruction.md": instruction + "\n", "task.toml": TOML,
            "environment/Dockerfile": dockerfile, "tests/test.sh": check,
            "solution/solve.sh": solution + "\n"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for i in range(args.count):
        kind = ("write", "copy", "count")[i % 3]
        for path, text in task(kind, rng).items():
            target = args.out / f"{kind}-{i:03d}" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    print(f"wrote {args.count} Harbor tasks under {args.out}")


if __name__ == "__main__":
    main()
