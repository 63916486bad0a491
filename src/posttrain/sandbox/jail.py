"""The child side of ``posttrain.sandbox.runner``: everything that runs in the jailed process tree.

``python -I -S jail.py run SPEC_FD STATUS_FD`` reads a JSON spec from SPEC_FD and starts the
program; setup failures and the program's exit status go to STATUS_FD as JSON lines.

- ``namespaces``: the launcher forks a child that unshares user, mount, network, PID, IPC and
  UTS namespaces; the launcher, still in the parent namespace, writes its uid/gid maps; the
  child forks PID 1 of the new PID namespace, which builds the jail root (a tmpfs with
  read-only binds of the system and the interpreter, the workspace read-write at /workspace
  (or where the spec's ``at`` says), the spec's other ``mounts``,
  a private /tmp and /proc), pivots into it and forks the program: rlimits, an unprivileged
  uid without capabilities, no_new_privs, exec. When the program exits PID 1 reports its status
  and exits, and the kernel kills whatever is left in the namespace.
- ``fallback``: the launcher sets the rlimits and execs the program. Python code runs as
  ``python -I -B jail.py audited WORKSPACE CODE``, behind an audit hook that refuses the
  network, process creation, ctypes and files outside the workspace.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import sys

SANDBOX_UID = 1000  # the program's uid and gid inside the jail
NOBODY = 65534  # the host uid the program runs as when the sandbox's owner is root
WORKSPACE = "/workspace"

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MNT_DETACH = 1 << 18, 1 << 21, 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# statvfs flags of a mount that a remount from a user namespace must keep (the kernel locks them)
KEPT_FLAGS = {os.ST_RDONLY: MS_RDONLY, os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV,
              os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
              os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = {
    "passwd": f"root:x:0:0::/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::{WORKSPACE}:"
              f"/bin/sh\nnobody:x:{NOBODY}:{NOBODY}::/:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:{NOBODY}:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}
ETC_SHARED = ("alternatives", "ld.so.cache", "localtime")  # bound read-only where present
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "shm": "/tmp"}

_libc = None


def _sys(name: str, *args) -> int:
    """libc ``name(*args)`` (ints passed as unsigned long); OSError on -1."""
    global _libc
    import ctypes  # here, not at the top: an audited Python program must not find it imported
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    result = getattr(_libc, name)(*(ctypes.c_ulong(a) if isinstance(a, int) else a for a in args))
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args!r}: {os.strerror(err)}")
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _sys("mount", *(None if s is None else os.fsencode(s) for s in (source, target, fstype)),
         flags, None if data is None else os.fsencode(data))


def _report(status: int, **fields) -> None:
    os.write(status, (json.dumps(fields) + "\n").encode())


def _guarded(status: int, stage: str, fn, *args) -> None:
    """Run a forked process's body; an exception is reported as a failure of ``stage``."""
    try:
        fn(*args)
    except BaseException as e:  # any failure before exec is the jail's, never the program's
        _report(status, error=f"{stage}: {type(e).__name__}: {e}")
    os._exit(125)


def _wait(pid: int) -> int:
    """Wait for ``pid``; its exit code, or 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return code if code >= 0 else 128 - code


def _limit(limits: dict) -> None:
    mib = 1 << 20
    for res, soft, hard in ((resource.RLIMIT_CPU, limits["cpu_s"], limits["cpu_s"] + 1),
                            (resource.RLIMIT_AS, limits["memory_mb"] * mib, None),
                            (resource.RLIMIT_NPROC, limits["nproc"], None),
                            (resource.RLIMIT_FSIZE, limits["fsize_mb"] * mib, None),
                            (resource.RLIMIT_CORE, 0, None)):
        resource.setrlimit(res, (soft, soft if hard is None else hard))


def _exec(spec: dict, cwd: str, uid: int | None) -> None:
    """Become the program: cwd, rlimits, ``uid`` (if given, dropping capabilities), exec."""
    os.chdir(cwd)
    _limit(spec["limits"])
    if uid is not None and os.getuid() != uid:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _sys("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; the program must not
        signal.signal(sig, signal.SIG_DFL)
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


# --- namespaces mode -----------------------------------------------------------------------


def _mount_points(under: str) -> list[str]:
    """Mount points at or below ``under`` in this mount namespace."""
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\(\d{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
                  for line in f]
    return [p for p in points if p == under or p.startswith(under.rstrip("/") + "/")]


def _bind(source: str, target: str, writable: bool = False) -> None:
    """Bind ``source`` (and the mounts below it) at ``target``: nosuid, nodev, read-only
    unless ``writable``."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    for point in _mount_points(target):
        kept = os.statvfs(point).f_flag
        flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY)
        _mount(None, point, None, flags | sum(ms for st, ms in KEPT_FLAGS.items() if kept & st))


def _copy_entry(source: str, target: str) -> None:
    """``source`` (a symlink or a directory or file, if it exists) at ``target``, read-only."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
    elif os.path.exists(source):
        _bind(source, target)


def interpreter_dirs(prefixes: list[str]) -> list[str]:
    """The interpreter's install trees outside the system directories, outermost first."""
    dirs: list[str] = []
    for d in sorted({os.path.realpath(p) for p in prefixes}):
        if not any(d == t or d.startswith(t + "/") for t in (*SYSTEM_DIRS, *dirs)):
            dirs.append(d)
    return dirs


def _build_root(root: str, workspace: str, tmp_mb: int, prefixes: list[str], at: str,
                mounts: list[list]) -> None:
    """Assemble the jail's file system at ``root`` and pivot into it: the workspace at ``at``,
    each ``[host directory, jail path, writable]`` of ``mounts`` at its path."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for d in SYSTEM_DIRS:
        _copy_entry(d, root + d)
    os.mkdir(root + "/tmp")  # before the interpreter: a virtualenv may live under /tmp
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
    for d in interpreter_dirs(prefixes):
        _bind(d, root + d)
    os.mkdir(root + "/etc")
    for name, text in ETC_FILES.items():
        with open(f"{root}/etc/{name}", "w") as f:
            f.write(text)
    for name in ETC_SHARED:
        _copy_entry("/etc/" + name, f"{root}/etc/{name}")
    os.mkdir(root + "/dev")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        _mount("/dev/" + name, f"{root}/dev/{name}", None, MS_BIND)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{root}/dev/{name}")
    _bind(workspace, root + at, writable=True)
    for host, path, writable in mounts:
        _bind(host, root + path, writable=writable)
    os.mkdir(root + "/proc")
    try:  # the PID namespace's own /proc; a kernel may refuse it (e.g. under a masked /proc)
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass
    os.chdir(root)
    _sys("syscall", SYS_PIVOT_ROOT[os.uname().machine], b".", b".")
    _sys("umount2", b".", MNT_DETACH)  # the host's file system, stacked under the new root
    os.chdir("/")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _init(spec: dict, status: int) -> None:
    """PID 1 of the jail: build it, run the program, report its status."""
    _sys("prctl", PR_SET_PDEATHSIG, signal.SIGKILL)
    _sys("prctl", PR_SET_DUMPABLE, 0)
    _build_root(spec["root"], spec["workspace"], spec["limits"]["tmp_mb"], spec["prefixes"],
                spec["at"], spec["mounts"])
    _sys("sethostname", b"sandbox", 7)
    pid = os.fork()
    if pid == 0:
        _guarded(status, "exec", _exec, spec, spec["at"], SANDBOX_UID)
    while True:  # also reaps the orphans that the kernel re-parents to PID 1
        done, wait_status = os.wait()
        if done == pid:
            _report(status, returncode=os.waitstatus_to_exitcode(wait_status))
            os._exit(0)


def _unshared(spec: dict, status: int, ready: int, go: int) -> None:
    _sys("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
         | CLONE_NEWUTS)
    os.write(ready, b"1")
    if os.read(go, 1) != b"1":  # the launcher could not map our ids and said why
        os._exit(125)
    _sys("prctl", PR_SET_PDEATHSIG, signal.SIGKILL)
    pid = os.fork()
    if pid == 0:
        _guarded(status, "jail setup", _init, spec, status)
    os._exit(_wait(pid))


def _map_ids(pid: int) -> None:
    """The child's uid/gid maps. Unprivileged: SANDBOX_UID is us. Root: 0 is root (to build the
    jail) and SANDBOX_UID is NOBODY, so that RLIMIT_NPROC applies (the kernel exempts root)."""
    def write(name: str, text: str) -> None:
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(text)
    if os.geteuid() == 0:
        write("uid_map", f"0 0 1\n{SANDBOX_UID} {NOBODY} 1\n")
        write("gid_map", f"0 0 1\n{SANDBOX_UID} {NOBODY} 1\n")
    else:
        write("setgroups", "deny")
        write("uid_map", f"{SANDBOX_UID} {os.geteuid()} 1\n")
        write("gid_map", f"{SANDBOX_UID} {os.getegid()} 1\n")


def _chown_tree(top: str, uid: int) -> None:
    for d, dirs, files in os.walk(top):
        os.lchown(d, uid, uid)
        for name in dirs + files:
            os.lchown(os.path.join(d, name), uid, uid)


def _namespaces(spec: dict, status: int) -> None:
    _sys("prctl", PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.geteuid() == 0:
        for top in [spec["workspace"], *(host for host, _, writable in spec["mounts"] if writable)]:
            _chown_tree(top, NOBODY)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        _guarded(status, "unshare", _unshared, spec, status, ready_w, go_r)
    os.close(ready_w)
    os.close(go_r)
    if os.read(ready_r, 1) == b"1":
        try:
            _map_ids(pid)
            os.write(go_w, b"1")
        except OSError as e:
            _report(status, error=f"uid/gid maps: {e}")
    os.close(go_w)
    os._exit(_wait(pid))


# --- fallback mode -------------------------------------------------------------------------

REFUSED = {  # audit events refused outright
    "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "pty.spawn",
    "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit",
    "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "socket.bind", "socket.connect", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo", "socket.sethostname",
}
REFUSED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess"}
PATH_EVENTS = {  # audit event: (positions of its path arguments, whether it writes)
    "os.listdir": ((0,), False), "os.scandir": ((0,), False), "os.getxattr": ((0,), False),
    "os.listxattr": ((0,), False), "os.chdir": ((0,), False), "os.chmod": ((0,), True),
    "os.chown": ((0,), True), "os.mkdir": ((0,), True), "os.remove": ((0,), True),
    "os.rmdir": ((0,), True), "os.rename": ((0, 1), True), "os.link": ((0, 1), True),
    "os.symlink": ((1,), True), "os.truncate": ((0,), True), "os.utime": ((0,), True),
    "os.setxattr": ((0,), True), "os.removexattr": ((0,), True),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _install_audit_hook(workspace: str) -> None:
    """Refuse REFUSED events, REFUSED_IMPORTS, non-Unix sockets, and file access outside the
    workspace (reads may also reach the interpreter's install trees and a few devices). The hook
    uses only callables captured here, so patching modules or builtins does not change it."""
    import _posixsubprocess
    import posix
    import stat

    def refuse_processes(*args, **kwargs):
        raise PermissionError("sandbox: process creation is refused")
    _posixsubprocess.fork_exec = refuse_processes  # it raises no audit event of its own

    lstat, readlink, getcwd, is_link = posix.lstat, posix.readlink, posix.getcwd, stat.S_ISLNK
    isinstance_, str_, bytes_, int_ = isinstance, str, bytes, int
    exact, decode = str.__str__, bytes.decode  # a plain str, whatever a subclass overrides
    any_, list_, reversed_ = any, list, reversed
    refused, refused_imports = frozenset(REFUSED), frozenset(REFUSED_IMPORTS)
    path_events, write_flags, af_unix = dict(PATH_EVENTS), WRITE_FLAGS, 1

    def real(path: str) -> str:
        """``os.path.realpath`` from the captured primitives."""
        pending = list_(reversed_((path if path.startswith("/") else getcwd() + "/" + path)
                                .split("/")))
        parts: list[str] = []
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                parts = parts[:-1]
                continue
            here = "/" + "/".join(parts + [part])
            try:
                link = is_link(lstat(here).st_mode)
            except OSError:
                link = False
            if not link:
                parts = parts + [part]
                continue
            hops += 1
            if hops > 40:
                raise PermissionError("sandbox: too many symlinks")
            target = readlink(here)
            parts = [] if target.startswith("/") else parts
            pending.extend(reversed_(target.split("/")))
        return "/" + "/".join(parts)

    home = real(workspace)
    readable = (home, "/dev/null", "/dev/zero", "/dev/urandom", *{
        real(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
    writable = (home, "/dev/null")

    def check(event: str, path, write: bool) -> None:
        if path is None:
            path = "."
        if isinstance_(path, int_):
            return  # an open descriptor: checked when it was opened
        if isinstance_(path, bytes_):
            path = decode(path, "utf-8", "surrogateescape")
        elif isinstance_(path, str_):
            path = exact(path)
        else:
            raise PermissionError(f"sandbox: {event} takes only str or bytes paths here")
        resolved = real(path)
        if not any_(resolved == r or resolved.startswith(r + "/")
                    for r in (writable if write else readable)):
            raise PermissionError(f"sandbox: {event} outside the workspace is refused: {path!r}")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            write = (flags & write_flags) != 0 if isinstance_(flags, int_) else any_(
                c in (mode or "") for c in "wax+")
            check(event, path, write)
        elif event in path_events:
            positions, write = path_events[event]
            for i in positions:
                check(event, args[i], write)
        elif event in refused or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is refused")
        elif event == "import" and exact(args[0]).partition(".")[0] in refused_imports:
            raise ImportError(f"sandbox: importing {args[0]} is refused")
        elif event == "socket.__new__" and args[1] != af_unix:
            raise PermissionError("sandbox: only Unix sockets (socketpair) are allowed")

    sys.addaudithook(hook)


def _audited(workspace: str, code: str) -> None:
    """Run ``code`` as ``python -c`` would, behind the audit hook."""
    import subprocess  # noqa: F401  (imported before the hook: modules that import it still load)
    import types

    _install_audit_hook(workspace)
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv[:] = ["-c"]
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:  # printed without this frame, as python -c prints it
        e = e.with_traceback(e.__traceback__.tb_next)
        sys.excepthook(type(e), e, e.__traceback__)
        raise SystemExit(1) from None


def main(argv: list[str]) -> None:
    if argv[1] == "audited":
        return _audited(argv[2], argv[3])
    spec_fd, status = int(argv[2]), int(argv[3])
    with os.fdopen(spec_fd, "rb") as f:
        spec = json.loads(f.read())
    os.set_inheritable(status, False)  # closed when the program execs
    if spec["mode"] == "namespaces":
        _guarded(status, "launch", _namespaces, spec, status)
    _guarded(status, "exec", _exec, spec, spec["workspace"], None)


if __name__ == "__main__":
    main(sys.argv)
