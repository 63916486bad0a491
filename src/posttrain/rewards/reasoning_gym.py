"""The ``reasoning_gym`` verifier: a reasoning-gym dataset's own ``score_answer`` on the
completion's ``<answer>``. The reference names the entry (JSON of dataset, seed, size, config
and index); datasets are rebuilt deterministically and cached. Needs the optional
``reasoning-gym`` package (``pip install posttrain[rgym]``)."""

from __future__ import annotations

import json
from functools import lru_cache

from posttrain.config.family import member
from posttrain.rewards.verifiers import extract_answer


@lru_cache(maxsize=16)
def gym_dataset(name: str, seed: int, size: int, config: str = "{}"):
    """The procedural dataset (``config``: JSON of its keyword arguments), built once."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError("the reasoning_gym task needs the reasoning-gym package: "
                          "pip install 'posttrain[rgym]'") from e
    return reasoning_gym.create_dataset(name, seed=seed, size=size, **json.loads(config))


def gym_reference(name: str, seed: int, size: int, config: dict, index: int) -> str:
    return json.dumps({"dataset": name, "seed": seed, "size": size, "config": config,
                       "index": index}, sort_keys=True)


@member("verifier", "reasoning_gym")
def reasoning_gym_score(completion: str, reference: str) -> float:
    """``score_answer(answer, entry)`` of the entry the reference names (0 without an answer)."""
    ref = json.loads(reference)
    ds = gym_dataset(ref["dataset"], ref["seed"], ref["size"],
                     json.dumps(ref["config"], sort_keys=True))
    answer = extract_answer(completion)
    return float(ds.score_answer(answer, ds[ref["index"]])) if answer is not None else 0.0
