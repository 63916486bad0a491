"""Run untrusted Python or shell in a jail: its own temporary workspace, no network, rlimits on
CPU, memory, processes and file size, a wall-clock timeout, a scrubbed environment and capped
output (docs/agents.md, "Sandbox").

Isolation is ``namespaces`` where the kernel allows unprivileged user namespaces — the program
sees only the system directories, the interpreter, its workspace (/workspace) and a private
/tmp, has no network interface and no capabilities, and everything it started dies with it
(``jail.py``) — else ``fallback``: rlimits, and for Python an audit hook that refuses the
network, process creation and files outside the workspace; shell commands are refused there
unless ``allow_unisolated_shell``. A jail that fails to start raises SandboxError: nothing runs
unsandboxed by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from posttrain.sandbox import jail

PYTHON = sys.executable  # the programs' interpreter (the jail binds its install tree)
PREFIXES = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
MAX_CODE_BYTES = 128 * 1024 - 1  # ``code`` travels as one exec argument (MAX_ARG_STRLEN)
KILL_GRACE_S = 2.0  # how long output is still read after the program ended or was killed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. ``cpu_s`` (CPU seconds), ``memory_mb`` (address space), ``fsize_mb``
    (largest file written) and ``nproc`` (processes of the program's user) are rlimits of each
    process; ``wall_s`` bounds the whole run, ``tmp_mb`` the private /tmp (namespaces), and
    ``max_output_bytes`` each of stdout and stderr (its head and tail are kept)."""

    cpu_s: int = 10
    memory_mb: int = 1024
    nproc: int = 64
    fsize_mb: int = 16
    tmp_mb: int = 64
    wall_s: float = 20.0
    max_output_bytes: int = 64 * 1024


@dataclass
class SandboxResult:
    """One run. ``returncode`` is negative for a signal (-9 when killed at ``wall_s``, which
    sets ``timed_out``); ``stdout`` and ``stderr`` are capped around an ``[... omitted N of
    TOTAL bytes ...]`` marker; ``isolation`` is ``namespaces`` or ``fallback``."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    isolation: str


class SandboxError(RuntimeError):
    """The jail could not be built or the program could not be started."""


class _Capped:
    """The first and last ``limit // 2`` bytes of a stream, and its length."""

    def __init__(self, limit: int) -> None:
        self.head_room, self.tail_room = limit // 2, limit - limit // 2
        self.head, self.tail, self.size = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        room = max(self.head_room - len(self.head), 0)
        self.head += data[:room]
        self.tail += data[room:]
        del self.tail[:-self.tail_room]

    def text(self) -> str:
        omitted = self.size - len(self.head) - len(self.tail)
        if not omitted:
            return (self.head + self.tail).decode(errors="replace")
        return (f"{self.head.decode(errors='replace')}\n[... omitted {omitted} of {self.size} "
                f"bytes ...]\n{self.tail.decode(errors='replace')}")


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (its process group stays addressable)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _communicate(proc: subprocess.Popen, stdin: bytes, deadline: float,
                 limit: int) -> tuple[str, str, bool]:
    """Feed ``stdin`` and read capped stdout/stderr until both close. When the launcher exits
    (leftovers) or at ``deadline`` (timed out) its process group is killed. Returns stdout,
    stderr, timed_out."""
    sinks = {proc.stdout: _Capped(limit), proc.stderr: _Capped(limit)}
    pending = memoryview(stdin)
    timed_out, ended, grace, poll = False, False, 0.0, 0.001
    with selectors.DefaultSelector() as sel:
        for stream in sinks:
            sel.register(stream, selectors.EVENT_READ)
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while True:
            now = time.monotonic()
            if not ended:
                exited = _exited(proc.pid)
                if exited or now >= deadline:
                    ended, timed_out, grace = True, not exited, now + KILL_GRACE_S
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
            if ended and (now >= grace or not _reading(sel, sinks)):
                break
            events = sel.select(max(min(poll, (grace if ended else deadline) - now), 0))
            poll = 0.001 if events else min(poll * 2, 0.05)
            for key, _ in events:
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        pending = pending[os.write(stream.fileno(), pending[:65536]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(stream)
                        stream.close()
                elif data := os.read(stream.fileno(), 65536):
                    sinks[stream].add(data)
                else:
                    sel.unregister(stream)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()
    out, err = sinks.values()
    return out.text(), err.text(), timed_out


def _reading(sel: selectors.BaseSelector, sinks: dict) -> bool:
    return any(key.fileobj in sinks for key in sel.get_map().values())


def _read_status(fd: int) -> list[dict]:
    """The JSON lines the jail reported (whatever is buffered; the writers are gone)."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            data += chunk
    os.close(fd)
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def _run_jail(mode: str, argv: list[str], env: dict[str, str], workspace: Path, root: Path,
              limits: SandboxLimits, stdin: bytes, at: str = jail.WORKSPACE,
              mounts: Mapping[str, tuple[Path, bool]] | None = None) -> SandboxResult:
    """Start ``jail.py`` with the spec, collect the output, interpret the jail's status."""
    spec = {"mode": mode, "argv": argv, "env": env, "workspace": str(workspace),
            "root": str(root), "limits": dataclasses.asdict(limits), "at": at,
            "mounts": [[str(host), path, writable]
                       for path, (host, writable) in sorted((mounts or {}).items())],
            # the install trees as this process sees them: the jail runs with -S, which
            # hides a virtualenv's prefix from it
            "prefixes": PREFIXES}
    spec_r, spec_w = os.pipe()
    status_r, status_w = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", jail.__file__, "run", str(spec_r), str(status_w)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(spec_r, status_w), cwd=workspace, env=env, start_new_session=True)
    except OSError as e:
        os.close(spec_w)
        os.close(status_r)
        raise SandboxError(f"cannot start the jail: {e}") from e
    finally:
        os.close(spec_r)
        os.close(status_w)
    with contextlib.suppress(BrokenPipeError), open(spec_w, "wb") as f:
        f.write(json.dumps(spec).encode())  # a launcher that died reports why on the status
    stdout, stderr, timed_out = _communicate(proc, stdin, start + limits.wall_s,
                                             limits.max_output_bytes)
    proc.wait()
    seconds = time.monotonic() - start
    status = _read_status(status_r)
    if errors := [s["error"] for s in status if "error" in s]:
        raise SandboxError(f"the {mode} jail failed: " + "; ".join(errors))
    if codes := [s["returncode"] for s in status if "returncode" in s]:
        returncode = codes[-1]
    elif timed_out or mode == "fallback":  # the fallback launcher became the program
        returncode = proc.returncode
    else:
        raise SandboxError(f"the {mode} jail exited with {proc.returncode} and no status")
    return SandboxResult(returncode, stdout, stderr, timed_out, seconds, mode)


def jail_path(path: str) -> str:
    """``path`` normalised, if a jail can mount at it: absolute, not the root, and neither at
    nor under (nor above) a directory the jail builds itself, the interpreter's install trees
    among them; ValueError otherwise."""
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts or len(pure.parts) < 2:
        raise ValueError(f"not an absolute path below /: {path!r}")
    own = [PurePosixPath(d) for d in (*jail.SYSTEM_DIRS, "/etc", "/dev", "/proc", "/tmp",
                                      *jail.interpreter_dirs(PREFIXES))]
    for d in own:
        if pure == d or d in pure.parents or pure in d.parents:
            raise ValueError(f"{path!r} would hide or change the jail's own {d}")
    return str(pure)


def namespaces_available() -> bool:
    """Whether the namespace jail works on this machine (probed once: ``python -c pass``)."""
    return namespaces_problem() is None


@functools.cache
def namespaces_problem() -> str | None:
    """Why the namespace jail does not work on this machine (None: it works), probed once by
    running ``python -c pass`` in it (``posttrain doctor`` reports it)."""
    with tempfile.TemporaryDirectory(prefix="posttrain-sandbox-") as base:
        workspace, root = Path(base, "workspace"), Path(base, "root")
        workspace.mkdir()
        root.mkdir()
        try:
            result = _run_jail("namespaces", [PYTHON, "-I", "-S", "-c", "pass"], {}, workspace,
                               root, SandboxLimits(), b"")
        except SandboxError as e:
            logger.info("no namespace sandbox here: %s", e)
            return str(e)
    if result.returncode:
        return (f"python -c pass exited with {result.returncode} in the jail: "
                + (result.stderr.strip().splitlines() or [""])[-1])
    return None


def _remove_tree(top: Path) -> None:
    """``shutil.rmtree``, after making writable the directories a program locked."""
    for here, dirs, _ in os.walk(top):
        for name in dirs:
            path = os.path.join(here, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(top, ignore_errors=True)


class Sandbox:
    """A temporary workspace and the jail that runs programs in it; a context manager.

    ``files`` (relative path -> text) are written into the workspace. ``isolation``:
    ``auto`` (namespaces where available, else the fallback, with a warning), ``namespaces``
    (SandboxError where unavailable) or ``fallback``. Each run starts from the workspace's
    current files; nothing a run started survives it in namespaces mode. With namespaces, the
    workspace can appear at another absolute path (``at``: the programs' cwd and home, as a
    container's working directory) and ``mounts`` add host directories (jail path -> (host
    directory, writable)); neither can hide the system's directories. A read-only mount must
    be readable by others; a writable one is handed to the jail's user.
    """

    def __init__(self, files: Mapping[str, str] | None = None,
                 limits: SandboxLimits = SandboxLimits(), isolation: str = "auto",
                 allow_unisolated_shell: bool = False, at: str = jail.WORKSPACE,
                 mounts: Mapping[str, tuple[Path, bool]] | None = None) -> None:
        if isolation not in ("auto", "namespaces", "fallback"):
            raise ValueError(f"unknown isolation {isolation!r}")
        self.at, self.mounts = jail_path(at), {jail_path(p): m for p, m in (mounts or {}).items()}
        for path, (host, _) in self.mounts.items():
            if not Path(host).is_dir():
                raise ValueError(f"mount {path}: {host} is not a directory")
        if self.at in self.mounts:
            raise ValueError(f"the workspace ({self.at}) and the mounts need distinct paths")
        if isolation == "auto":
            isolation = "namespaces" if namespaces_available() else "fallback"
            if isolation == "fallback":
                logger.warning("user namespaces unavailable: the sandbox falls back to rlimits "
                               "and a Python audit hook (docs/agents.md, Sandbox)")
        elif isolation == "namespaces" and not namespaces_available():
            raise SandboxError("namespace isolation is unavailable on this machine")
        if isolation == "fallback" and (self.at != jail.WORKSPACE or self.mounts):
            raise SandboxError("placing the workspace or mounting directories needs namespace "
                               "isolation, which is unavailable here")
        self.isolation, self.limits = isolation, limits
        self.allow_unisolated_shell = allow_unisolated_shell
        self._base: Path | None = Path(os.path.realpath(tempfile.mkdtemp(
            prefix="posttrain-sandbox-")))
        self.workspace = self._base / "workspace"
        self.workspace.mkdir()
        (self._base / "root").mkdir()  # the jail's mount point
        for path, text in (files or {}).items():
            self.write(path, text)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the workspace (idempotent)."""
        if self._base is not None:
            _remove_tree(self._base)
            self._base = None

    def run_python(self, code: str, stdin: str = "",
                   extra_files: Mapping[str, str] | None = None) -> SandboxResult:
        """Run ``code`` as ``python -I -c code`` with the workspace as cwd (``-I``: the
        workspace is not on sys.path). ``extra_files`` exist only during this run."""
        if len(code.encode()) > MAX_CODE_BYTES or "\0" in code:
            raise ValueError(f"code must be at most {MAX_CODE_BYTES} bytes without NUL; write "
                             "a longer program to a file and run that")
        if self.isolation == "namespaces":
            argv = [PYTHON, "-I", "-B", "-c", code]
        else:
            argv = [PYTHON, "-I", "-B", jail.__file__, "audited", str(self.workspace), code]
        return self._run(argv, stdin, extra_files)

    def run_shell(self, command: str, stdin: str = "",
                  extra_files: Mapping[str, str] | None = None,
                  limits: SandboxLimits | None = None) -> SandboxResult:
        """Run ``command`` with ``/bin/sh -c`` in the workspace, within ``limits`` (default:
        the sandbox's). The fallback does not contain a shell: it raises SandboxError unless
        ``allow_unisolated_shell``."""
        if self.isolation == "fallback" and not self.allow_unisolated_shell:
            raise SandboxError("run_shell needs namespace isolation: the fallback cannot contain "
                               "a shell (pass allow_unisolated_shell=True to run it anyway)")
        return self._run(["/bin/sh", "-c", command], stdin, extra_files, limits)

    def write(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` (relative to the workspace), creating directories; a
        symlink at ``path`` is replaced, not followed."""
        real = self._path(path, follow=False)
        real.parent.mkdir(parents=True, exist_ok=True)
        if real.is_symlink():
            real.unlink()
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o644)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def read(self, path: str) -> str:
        """The text of the regular file ``path`` (relative to the workspace)."""
        fd = os.open(self._path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, encoding="utf-8", errors="replace") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"not a regular file: {path!r}")
            return f.read()

    def _path(self, path: str, follow: bool = True) -> Path:
        """``path`` resolved inside the workspace (its last component only if ``follow``);
        ValueError if it is absolute, has a ``..`` or leads outside through a symlink."""
        pure = PurePosixPath(path)
        if pure.is_absolute() or not pure.parts or ".." in pure.parts:
            raise ValueError(f"not a relative path inside the workspace: {path!r}")
        joined = self.workspace.joinpath(*pure.parts)
        real = Path(os.path.realpath(joined.parent), joined.name)
        real = Path(os.path.realpath(real)) if follow else real
        if self.workspace not in real.parents:
            raise ValueError(f"{path!r} leads outside the workspace")
        return real

    def _env(self) -> dict[str, str]:
        home = self.at if self.isolation == "namespaces" else str(self.workspace)
        return {"PATH": f"{os.path.dirname(PYTHON)}:/usr/local/bin:/usr/bin:/bin", "HOME": home,
                "TMPDIR": "/tmp" if self.isolation == "namespaces" else home,
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}

    def _run(self, argv: list[str], stdin: str, extra_files: Mapping[str, str] | None,
             limits: SandboxLimits | None = None) -> SandboxResult:
        if self._base is None:
            raise SandboxError("the sandbox is closed")
        added = [self._path(p, follow=False) for p in extra_files or {}]
        new_dirs = [d for p in added for d in p.parents
                    if self.workspace in d.parents and not d.exists()]
        try:
            for path, text in (extra_files or {}).items():
                self.write(path, text)
            return _run_jail(self.isolation, argv, self._env(), self.workspace,
                             self._base / "root", limits or self.limits, stdin.encode(), self.at,
                             self.mounts)
        finally:
            for p in added:
                if os.path.realpath(p.parent) == str(p.parent):  # no symlink planted on the way
                    with contextlib.suppress(OSError):
                        os.unlink(p)
            for d in sorted(set(new_dirs), key=lambda d: -len(d.parts)):
                if os.path.realpath(d) == str(d):
                    with contextlib.suppress(OSError):
                        d.rmdir()
