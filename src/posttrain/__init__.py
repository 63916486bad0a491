"""posttrain: post-train language models into reasoning and agentic models.

Layers import only downward (docs/architecture.md has the table and the picture): types ->
algos -> models -> config -> engines, rewards -> harness -> envs -> data -> rollout, train ->
cluster -> recipes -> cli.

Importing posttrain before torch chooses OpenMP's wait policy from the machine's state; it
changes how idle threads wait, never a number a run computes (docs/performance.md, "A busy
machine"). Where other processes keep at least ``BUSY_CORES`` cores busy during a
``PROBE_S`` look at ``/proc/stat`` (elsewhere: the 1-minute load average), it sets
``GOMP_SPINCOUNT=3000`` (a thread spins briefly, then sleeps; beside a busy PyTorch process
torch's long spin made GRPO steps up to 14x slower); on a quiet machine it leaves torch's spin
(15-25 % faster steps there). A ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` of the user's always
wins; after torch's import nothing can change. ``OPENMP_WAIT`` records the choice
(``summary.json``'s ``openmp``).
"""

import os
import sys
import time

__version__ = "0.1.0"

SHORT_SPINCOUNT = "3000"
BUSY_CORES = 0.5
PROBE_S = 0.05


def _busy_cores() -> float:
    """Cores kept busy by any process while this one sleeps ``PROBE_S`` (``/proc/stat``'s
    non-idle share of the machine's ticks, times its cores); the 1-minute load average where
    there is no ``/proc/stat``; 0 where neither can be read."""

    def ticks() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    try:
        total0, idle0 = ticks()
        time.sleep(PROBE_S)
        total1, idle1 = ticks()
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except (OSError, AttributeError):
            return 0.0
    total = total1 - total0
    return (total - (idle1 - idle0)) / total * (os.cpu_count() or 1) if total > 0 else 0.0


def choose_openmp_wait(environ, modules, busy_cores) -> dict:
    """The wait policy for a process with ``environ`` that has imported ``modules``, probing
    ``busy_cores()`` only when the choice is posttrain's to make."""
    user = {k: environ[k] for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in environ}
    if user:
        return {"policy": "user", **user}
    if "torch" in modules:  # its OpenMP runtime has read the environment already
        return {"policy": "unchanged", "why": "torch was imported before posttrain"}
    busy = round(busy_cores(), 2)
    if busy >= BUSY_CORES:
        return {"policy": "short_spin", "GOMP_SPINCOUNT": SHORT_SPINCOUNT, "busy_cores": busy}
    return {"policy": "torch", "busy_cores": busy}


OPENMP_WAIT = choose_openmp_wait(os.environ, sys.modules, _busy_cores)
if OPENMP_WAIT["policy"] == "short_spin":
    os.environ["GOMP_SPINCOUNT"] = SHORT_SPINCOUNT
