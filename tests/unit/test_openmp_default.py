"""Importing posttrain (as the CLI does, before torch) chooses OpenMP's wait policy from the
machine's state: a short spin where other processes keep the cores busy, torch's own on a quiet
machine; the user's ``GOMP_SPINCOUNT``/``OMP_WAIT_POLICY`` always win, and after torch's import
nothing changes (docs/performance.md, "A busy machine")."""

import json
import os
import subprocess
import sys

import posttrain
from posttrain import SHORT_SPINCOUNT, choose_openmp_wait

PROBE = ("import posttrain, os, json; "
         "print(json.dumps([posttrain.OPENMP_WAIT, os.environ.get('GOMP_SPINCOUNT')]))")
SPIN = "while True: pass"
CLEAN = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}


def imported(env: dict, code: str = PROBE) -> list:
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(run.stdout)


def test_beside_processes_that_keep_every_core_busy_posttrain_spins_briefly():
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count())]
    try:
        choice, spincount = imported(CLEAN)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert choice["policy"] == "short_spin" and spincount == SHORT_SPINCOUNT
    assert choice["busy_cores"] >= posttrain.BUSY_CORES


def test_the_users_setting_always_wins_and_torch_first_leaves_it_unchanged():
    assert imported({**CLEAN, "GOMP_SPINCOUNT": "300000"}) == [
        {"policy": "user", "GOMP_SPINCOUNT": "300000"}, "300000"]
    assert imported({**CLEAN, "OMP_WAIT_POLICY": "passive"}) == [
        {"policy": "user", "OMP_WAIT_POLICY": "passive"}, None]
    torch_first = "import torch; " + PROBE
    assert imported(CLEAN, torch_first) == [
        {"policy": "unchanged", "why": "torch was imported before posttrain"}, None]


def test_the_rule_keeps_torchs_spin_below_the_busy_threshold():
    def never():  # the probe must not run where the choice is not posttrain's
        raise AssertionError("probed")

    assert choose_openmp_wait({}, {}, lambda: 0.2) == {"policy": "torch", "busy_cores": 0.2}
    assert choose_openmp_wait({}, {}, lambda: 0.5)["policy"] == "short_spin"
    assert choose_openmp_wait({"GOMP_SPINCOUNT": "1"}, {}, never)["policy"] == "user"
    assert choose_openmp_wait({}, {"torch": None}, never)["policy"] == "unchanged"
