"""Importing posttrain (as the CLI does, before torch) shortens OpenMP's spin-wait unless the
user set it: threads without work sleep instead of spinning against another busy process
(docs/performance.md, "A busy machine")."""

import os
import subprocess
import sys

PROBE = "import posttrain, os; print(os.environ.get('GOMP_SPINCOUNT'))"


def spincount(env: dict) -> str:
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         check=True)
    return run.stdout.strip()


def test_posttrain_sets_a_short_spin_unless_the_user_chose_one():
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert spincount(env) == "3000"
    assert spincount({**env, "GOMP_SPINCOUNT": "300000"}) == "300000"
