"""The sandbox: normal runs, and an attack suite under both isolation modes."""

import os
import select
import signal
import socket
import uuid
from pathlib import Path

import pytest
from ci_policy import kernel_allows_namespaces

from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits, namespaces_available
from posttrain.sandbox import runner as sandbox_module

KERNEL_ALLOWS = kernel_allows_namespaces()
needs_namespaces = pytest.mark.namespaces  # deselected, and said so, where the kernel refuses


def test_the_jail_works_wherever_the_kernel_allows_namespaces():
    """The namespace tests run wherever the kernel allows; a jail that fails anyway is a bug (a
    virtualenv under /tmp once hid the interpreter from it)."""
    assert namespaces_available() == KERNEL_ALLOWS


MODES = [pytest.param("namespaces", marks=needs_namespaces), "fallback"]
FAST = SandboxLimits(cpu_s=1, wall_s=3.0)
BLOCKED = """\
def attempt(name, fn):
    try:
        fn()
        print('DONE', name)
    except (OSError, ImportError) as e:
        print('blocked', name, repr(e))
"""  # a prelude for attack code: one line per attempt, DONE when it was not refused
NET = BLOCKED + """\
import socket
def tcp(host, port):
    s = socket.socket()
    s.settimeout(2)
    s.connect((host, port))
def udp(host, port):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', (host, port))
"""


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


def run(mode: str, code: str, files=None, limits=FAST, **kwargs):
    with Sandbox(files, limits, isolation=mode) as sb:
        return sb.run_python(code, **kwargs)


def processes_with(marker: str) -> list[int]:
    """The pids whose command line contains ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


# --- normal operation ------------------------------------------------------------------------


def test_python_output_exit_code_and_stdin(mode):
    r = run(mode, "import sys\nprint(sys.stdin.read().upper())\nprint('err', file=sys.stderr)\n"
                  "sys.exit(3)", stdin="abc")
    assert (r.returncode, r.stdout, r.stderr, r.timed_out) == (3, "ABC\n", "err\n", False)
    assert r.isolation == mode
    r = run(mode, "1/0")
    assert r.returncode == 1
    assert r.stderr.splitlines()[1:] == ['  File "<string>", line 1, in <module>',
                                         "ZeroDivisionError: division by zero"]


def test_files_round_trip(mode):
    with Sandbox({"in/a.txt": "hi"}, FAST, isolation=mode) as sb:
        sb.write("b.txt", "there")
        r = sb.run_python("import os\nos.makedirs('out')\nwith open('out/c.txt', 'w') as f:\n"
                          "    f.write(open('in/a.txt').read().upper() + open('b.txt').read())")
        assert r.returncode == 0, r.stderr
        assert sb.read("out/c.txt") == "HIthere"
        workspace = sb.workspace
    assert not workspace.exists()


def test_stdlib_and_a_unittest_suite_run_in_the_workspace(mode):
    files = {"calc.py": "def add(a, b):\n    return a + b\n",
             "test_calc.py": "import unittest\nfrom calc import add\n\n"
                             "class T(unittest.TestCase):\n    def test_add(self):\n"
                             "        self.assertEqual(add(2, 3), 5)\n"}
    r = run(mode, "import json, unittest, sys\nprint(json.dumps({'a': 1}))\n"
                  "r = unittest.main(module=None, argv=['t', 'discover'], exit=False)\n"
                  "sys.exit(not r.result.wasSuccessful())", files)
    assert r.returncode == 0, r.stderr
    assert r.stdout == '{"a": 1}\n' and "Ran 1 test" in r.stderr and "OK" in r.stderr


@needs_namespaces
def test_shell_runs_in_the_workspace():
    with Sandbox({"a.txt": "x"}, FAST, isolation="namespaces") as sb:
        r = sb.run_shell("echo hi; ls; pwd; cat; python3 -c 'print(6 * 7)'", stdin="piped\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hi\na.txt\n/workspace\npiped\n42\n"


@needs_namespaces
def test_the_workspace_can_sit_elsewhere_beside_mounted_directories(tmp_path):
    """As a container's: the workspace at /app, hidden tests read-only at /tests, a log
    directory the program writes at /logs."""
    tests, logs = tmp_path / "tests", tmp_path / "logs"
    tests.mkdir(mode=0o755)
    logs.mkdir()
    (tests / "test.sh").write_text("cat /app/answer > /logs/reward.txt\n")
    mounts = {"/tests": (tests, False), "/logs": (logs, True)}
    with Sandbox({"answer": "1"}, FAST, isolation="namespaces", at="/app", mounts=mounts) as sb:
        r = sb.run_shell("pwd; echo $HOME; sh /tests/test.sh; echo no > /tests/test.sh")
    assert r.stdout == "/app\n/app\n" and "Read-only file system" in r.stderr
    assert (logs / "reward.txt").read_text() == "1"
    assert (tests / "test.sh").read_text().startswith("cat")


@needs_namespaces
def test_one_shell_runs_within_limits_of_its_own():
    """``run_shell(limits=...)`` bounds that run only (Harbor's verifier gets its task's
    timeout); the sandbox's own limits stay."""
    with Sandbox(limits=SandboxLimits(wall_s=30.0), isolation="namespaces") as sb:
        assert sb.run_shell("sleep 20", limits=SandboxLimits(wall_s=1.0)).timed_out
        assert sb.limits.wall_s == 30.0 and not sb.run_shell("sleep 2").timed_out


def test_a_workspace_or_mount_cannot_hide_the_jails_own_directories(tmp_path, monkeypatch):
    for path, hidden in (("/usr/local", "/usr"), ("/tmp", "/tmp"), ("/", None),
                         ("app", None), ("/a/../etc", None)):
        with pytest.raises(ValueError, match=hidden or "absolute path below"):
            Sandbox(limits=FAST, at=path)
    with pytest.raises(ValueError, match="distinct"):
        Sandbox(limits=FAST, at="/app", mounts={"/app": (tmp_path, False)})
    # nor the interpreter's install tree (a workspace at /root would hide pyenv's Python)
    monkeypatch.setattr(sandbox_module, "PREFIXES", ["/opt/python3.12"])
    for path in ("/opt/python3.12", "/opt", "/opt/python3.12/lib"):
        with pytest.raises(ValueError, match="jail's own /opt/python3.12"):
            Sandbox(limits=FAST, at=path)
    with pytest.raises(SandboxError, match="namespace isolation"):
        Sandbox(limits=FAST, isolation="fallback", at="/app")


def test_fallback_refuses_the_shell_unless_allowed():
    with Sandbox(limits=FAST, isolation="fallback") as sb:
        with pytest.raises(SandboxError, match="allow_unisolated_shell"):
            sb.run_shell("echo hi")
    with Sandbox(limits=FAST, isolation="fallback", allow_unisolated_shell=True) as sb:
        assert sb.run_shell("echo hi").stdout == "hi\n"


def test_paths_must_stay_inside_the_workspace(tmp_path):
    with Sandbox(limits=FAST, isolation="fallback") as sb:
        for bad in ("../x", "/etc/passwd", "a/../../x", "", "."):
            with pytest.raises(ValueError):
                sb.write(bad, "x")
            with pytest.raises(ValueError):
                sb.read(bad)
        (sb.workspace / "link").symlink_to(tmp_path)
        with pytest.raises(ValueError, match="outside"):
            sb.write("link/x", "pwned")
        with pytest.raises(ValueError, match="outside"):
            sb.run_python("pass", extra_files={"link/x": "pwned"})
        with pytest.raises(ValueError, match="outside"):
            sb.read("link")
        (sb.workspace / "out").symlink_to(tmp_path / "x")
        sb.write("out", "replaces the link")
        assert not (sb.workspace / "out").is_symlink() and sb.read("out") == "replaces the link"
    assert not (tmp_path / "x").exists()


def test_a_jail_that_cannot_start_raises(mode, monkeypatch):
    monkeypatch.setattr(sandbox_module, "PYTHON", "/nonexistent/python3")
    with Sandbox(limits=FAST, isolation=mode) as sb, pytest.raises(SandboxError, match="exec"):
        sb.run_python("print('ran')")


# --- attacks ---------------------------------------------------------------------------------


def test_fork_bomb_is_contained(mode):
    marker, limits = uuid.uuid4().hex, SandboxLimits(cpu_s=1, wall_s=2.0)
    r = run(mode, f"import os  # {marker}\nwhile True:\n    try:\n        os.fork()\n"
                  "    except Exception:\n        pass\n", limits=limits)
    assert r.returncode != 0 and r.seconds < limits.wall_s + sandbox_module.KILL_GRACE_S
    assert processes_with(marker) == []
    assert run(mode, "print('fine')").stdout == "fine\n"


@needs_namespaces
def test_shell_fork_bomb_is_contained():
    marker = uuid.uuid4().hex
    # a wall limit with room: on a loaded 2-core machine the bomb's 64 processes can take
    # seconds to hit RLIMIT_NPROC, and the shell must outlive them to say it is alive
    limits = SandboxLimits(cpu_s=1, wall_s=15.0)
    with Sandbox(limits=limits, isolation="namespaces") as sb:
        r = sb.run_shell(f": {marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 1; echo alive")
        assert r.stdout == "alive\n" and "fork" in r.stderr, r  # it hit RLIMIT_NPROC
        assert processes_with(marker) == []
        r = sb.run_shell(f"bash -c ': {marker}; :(){{ :|:& }};:'")  # the classic
        assert r.seconds < limits.wall_s + sandbox_module.KILL_GRACE_S
        assert processes_with(marker) == []


def test_memory_bomb_fails(mode):
    r = run(mode, "b = bytearray(10 * 2**30)")
    assert r.returncode == 1 and "MemoryError" in r.stderr
    r = run(mode, "x = []\nwhile True:\n    x.append(bytearray(10**7))",
            limits=SandboxLimits(cpu_s=2, memory_mb=256, wall_s=3.0))
    assert r.returncode == 1 and "MemoryError" in r.stderr


def test_infinite_loop_is_killed_by_the_cpu_limit(mode):
    r = run(mode, "while True:\n    pass", limits=SandboxLimits(cpu_s=1, wall_s=10.0))
    assert r.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not r.timed_out


def test_wall_clock_timeout(mode):
    r = run(mode, "import time\nprint('started', flush=True)\ntime.sleep(60)",
            limits=SandboxLimits(wall_s=1.0))
    assert r.timed_out and r.returncode == -signal.SIGKILL and r.stdout == "started\n"
    assert r.seconds < 1.0 + sandbox_module.KILL_GRACE_S


def test_no_connection_reaches_the_parents_loopback(mode):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        r = run(mode, NET + f"attempt('tcp', lambda: tcp('127.0.0.1', {port}))\n"
                f"attempt('udp', lambda: udp('127.0.0.1', {port}))\n")
        assert r.stdout.count("blocked") == 2 and "DONE" not in r.stdout, r.stdout + r.stderr
        assert select.select([listener], [], [], 0.2)[0] == []  # no pending connection


def test_no_connection_reaches_outside(mode):
    r = run(mode, NET + "attempt('tcp', lambda: tcp('10.255.255.1', 80))\n"
            "attempt('tcp', lambda: tcp('1.1.1.1', 53))\n"
            "attempt('udp', lambda: udp('8.8.8.8', 53))\n"
            "attempt('dns', lambda: socket.getaddrinfo('example.com', 80))\n")
    assert r.stdout.count("blocked") == 4 and "DONE" not in r.stdout, r.stdout + r.stderr
    assert r.seconds < 2  # refused at once, not after a connect timeout


def test_files_outside_the_workspace_cannot_be_read(mode, tmp_path):
    secret = uuid.uuid4().hex
    (tmp_path / "secret.txt").write_text(secret)
    r = run(mode, BLOCKED + f"attempt('secret', lambda: print(open({str(tmp_path)!r} + "
            "'/secret.txt').read()))\n"
            "attempt('hostname', lambda: print(open('/etc/hostname').read()))\n"
            "attempt('repo', lambda: print(open(" + repr(__file__) + ").read()))\n"
            f"attempt('listing', lambda: print(__import__('os').listdir({str(tmp_path)!r})))\n")
    assert r.stdout.count("blocked") == 4 and "DONE" not in r.stdout, r.stdout + r.stderr
    assert secret not in r.stdout + r.stderr


def test_files_outside_the_workspace_cannot_be_written(mode, tmp_path):
    name = f"pwned-{uuid.uuid4().hex}"
    targets = [tmp_path / name, Path("/tmp") / name]
    with Sandbox(limits=FAST, isolation=mode) as sb:
        targets.append(sb.workspace.parent / name)
        sb.run_python("import os\nfor t in %r:\n    try:\n        open(t, 'w').write('x')\n"
                      "    except OSError:\n        pass\n" % [str(t) for t in targets])
    assert [t for t in targets if t.exists()] == []


def test_hidden_tests_are_invisible_until_the_verifier_runs(mode, tmp_path):
    hidden = tmp_path / "verifier" / "test_hidden.py"  # where the verifier keeps them
    hidden.parent.mkdir()
    hidden.write_text("import unittest\nfrom solution import answer\n\n"
                      "class Hidden(unittest.TestCase):\n    def test(self):\n"
                      "        self.assertEqual(answer(), 42)\n")
    verify = ("import sys, unittest\nsys.path.insert(0, '.')\nr = unittest.main(module=None, "
              "argv=['v', 'discover', '-s', 'tests'], exit=False)\n"
              "sys.exit(not r.result.wasSuccessful())")
    with Sandbox({"solution.py": "def answer():\n    return 42\n"}, FAST, isolation=mode) as sb:
        r = sb.run_python(BLOCKED + f"attempt('read', lambda: print(open({str(hidden)!r}).read()))"
                          "\nimport glob\nprint('found', glob.glob('**/*hidden*', recursive=True)"
                          " + glob.glob('/tmp/**/*hidden*', recursive=True))")
        assert "blocked read" in r.stdout and "found []" in r.stdout, r.stdout + r.stderr
        assert "Hidden" not in r.stdout
        r = sb.run_python(verify, extra_files={"tests/test_hidden.py": hidden.read_text()})
        assert r.returncode == 0 and "Ran 1 test" in r.stderr, r.stderr
        with pytest.raises(FileNotFoundError):
            sb.read("tests/test_hidden.py")
        assert not (sb.workspace / "tests").exists()


def test_the_parents_environment_is_not_visible(mode, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("POSTTRAIN_TEST_SECRET", secret)
    r = run(mode, BLOCKED + "import os\nprint(dict(os.environ))\n"
            "for p in ('/proc/self/environ', '/proc/1/environ'):\n"
            "    attempt(p, lambda: print(open(p, 'rb').read()))\n")
    assert r.returncode == 0 and "HOME" in r.stdout, r.stderr
    assert secret not in r.stdout + r.stderr


def test_output_is_capped(mode):
    limits = SandboxLimits(cpu_s=1, wall_s=3.0, max_output_bytes=4096)
    r = run(mode, "import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stderr.write('y' * 10**7)",
            limits=limits)
    assert r.returncode == 0 and "[... omitted 9995904 of 10000000 bytes ...]" in r.stdout
    assert len(r.stdout) < 4200 and len(r.stderr) < 4200
    r = run(mode, "while True:\n    print('x' * 1000)", limits=limits)  # printing forever
    assert r.returncode != 0 and len(r.stdout) < 4200 and "omitted" in r.stdout


def test_file_size_limit(mode):
    r = run(mode, "with open('big.bin', 'wb') as f:\n    for _ in range(100):\n"
                  "        f.write(b'0' * 2**20)", limits=SandboxLimits(fsize_mb=4, wall_s=3.0))
    assert r.returncode == 1 and "File too large" in r.stderr


@needs_namespaces
def test_the_namespace_jail_holds_no_privileges():
    name = f"pwned-{uuid.uuid4().hex}"
    with Sandbox(limits=FAST, isolation="namespaces") as sb:
        r = sb.run_shell("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
                         f"touch /usr/{name} /{name}; mount -t tmpfs none /usr; "
                         f"unshare -Urm sh -c 'mount -o remount,rw /usr && touch /usr/{name}'; "
                         "ls /; true")
    assert r.stdout.splitlines()[:3] == ["1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1"]
    listing = r.stdout.splitlines()[3:]  # the root of the jail
    assert "workspace" in listing and not {"work", "home", "mnt", "opt"} & set(listing)
    assert not Path(f"/usr/{name}").exists() and not Path(f"/{name}").exists()


def test_fallback_refuses_processes_and_ctypes():
    r = run("fallback", BLOCKED + "import os, subprocess\n"
            "attempt('subprocess', lambda: subprocess.run(['true']))\n"
            "attempt('system', lambda: os.system('true'))\n"
            "attempt('fork', os.fork)\n"
            "attempt('ctypes', lambda: __import__('ctypes'))\n"
            "import _posixsubprocess\n"
            "attempt('fork_exec', lambda: _posixsubprocess.fork_exec())\n")
    assert r.stdout.count("blocked") == 5 and "DONE" not in r.stdout, r.stdout + r.stderr
