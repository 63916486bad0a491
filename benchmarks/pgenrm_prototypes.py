"""P-GenRM's prototype module on synthetic users with known preferences: held-out pairwise
accuracy of the trained module against one preference vector for everyone (Bradley-Terry on
all pairs), the module without its pulls to the prototypes (``lam_cent = lam_tr = 0``), and
the users' true preferences (the ceiling). Prints JSON.

    python benchmarks/pgenrm_prototypes.py [--seeds 0 1 2] [--users 64] [--types 4]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from posttrain.models.preference_prototypes import PreferencePrototypes
from posttrain.rewards.synthetic_users import (
    accuracy,
    global_deltas,
    prototype_deltas,
    synthetic_users,
    train_prototypes,
)


def held_out(data, n_types: int, seed: int, **pulls) -> float:
    model = PreferencePrototypes(len(data.weights), data.weights.shape[1], n_types)
    train_prototypes(model, data, seed=seed, **pulls)
    with torch.no_grad():
        return accuracy(prototype_deltas(model, data, data.test))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--types", type=int, default=4)
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        data = synthetic_users(args.users, args.types, seed=seed)
        truth = (data.test.chosen - data.test.rejected) * data.weights[data.test.users]
        rows.append({"seed": seed, "prototypes": held_out(data, args.types, seed),
                     "no_pulls": held_out(data, args.types, seed, lam_cent=0.0, lam_tr=0.0),
                     "one_preference": accuracy(global_deltas(data)),
                     "true_preferences": accuracy(truth.sum(dim=-1)),
                     "held_out_pairs": len(data.test.users)})
        print(json.dumps(rows[-1]), flush=True)
    means = {k: statistics.fmean(r[k] for r in rows)
             for k in ("prototypes", "no_pulls", "one_preference", "true_preferences")}
    print(json.dumps({"benchmark": "pgenrm_prototypes", "users": args.users,
                      "types": args.types, "mean": means, "rows": rows}))


if __name__ == "__main__":
    main()
