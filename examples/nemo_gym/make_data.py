"""Write the rows of the ``arith_gym`` NeMo-Gym environment (``arith_gym/data``): 200 train
and 50 eval additions, the quickstart's way (``What is 12+34?``), their first five as
``example.jsonl``, and 10 more that offer the ``add`` tool (``tools.jsonl``)::

    python examples/nemo_gym/make_data.py
"""

import json
import random
from pathlib import Path

DATA = Path(__file__).with_name("arith_gym") / "data"
ADD = {"type": "function", "name": "add", "description": "Add two integers.", "strict": True,
       "parameters": {"type": "object", "required": ["a", "b"], "additionalProperties": False,
                      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}


def row(a: int, b: int, tools: bool = False) -> dict:
    question = f"What is {a:02d}+{b:02d}?"
    params = {"input": [{"role": "user", "content": question}]}
    return {"responses_create_params": params | ({"tools": [ADD]} if tools else {}),
            "expected_answer": str(a + b)}


def write(name: str, rows: list[dict]) -> None:
    (DATA / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    rng = random.Random(0)
    pairs = [(rng.randrange(10, 100), rng.randrange(10, 100)) for _ in range(260)]
    DATA.mkdir(parents=True, exist_ok=True)
    write("train.jsonl", [row(a, b) for a, b in pairs[:200]])
    write("eval.jsonl", [row(a, b) for a, b in pairs[200:250]])
    write("example.jsonl", [row(a, b) for a, b in pairs[:5]])
    write("tools.jsonl", [row(a, b, tools=True) for a, b in pairs[250:]])
    print(f"wrote {DATA}")
