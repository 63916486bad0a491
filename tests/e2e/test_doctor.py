"""``posttrain doctor``: a healthy environment passes, and a CUDA torchvision that breaks vLLM
(simulated by a package raising vLLM's startup error) is flagged with the fix; the sandbox's
user namespaces (reported as the kernel allows them, and a kernel that refuses them, made by a
user namespace whose limit is reached, named with its fix), the Tinker SDK, and the Pythons of
verifiers and NeMo-Gym environments (a venv holding one found with its version, a broken one
flagged, none said to be optional with how to build it)."""

import importlib.metadata
import subprocess
import sys

import pytest
from ci_policy import kernel_allows_namespaces
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.doctor import (
    FALLBACK,
    LIBRARIES,
    UNINSTALL,
    checks,
    library_check,
    sandbox_check,
)

pytestmark = pytest.mark.slow


def test_this_environment_is_healthy():
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "2.13.0" in result.output
    absent = [line for line in result.output.splitlines() if "not installed" in line]
    assert all(" ok " not in line for line in absent)  # an absent part is never "ok"
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines()
            if line.count("│") > 4 and line.split("│")[1].strip()}
    assert {"tinker", "sandbox", "verifiers", "nemo-gym"} <= set(rows)
    assert " ok " in rows["tinker"] and importlib.metadata.version("tinker") in rows["tinker"]


def test_a_broken_cuda_torchvision_is_flagged_with_the_uninstall(tmp_path, monkeypatch):
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    by_name = {c.name: c for c in checks()}
    assert by_name["torchvision"].status == "broken" and by_name["torchvision"].fix == UNINSTALL
    assert "torchvision::nms" in by_name["torchvision"].detail
    assert by_name["torch"].ok  # (packages importing torchvision, such as peft, break too)


def test_the_sandbox_check_says_what_the_kernel_allows():
    check = sandbox_check()
    assert check.ok  # (the sandbox falls back without namespaces: never a failure)
    if kernel_allows_namespaces():
        assert check.status == "ok" and "the jail works" in check.detail
    else:
        assert check.status == "unavailable (optional)" and check.fix.endswith(FALLBACK)


REFUSING = ("echo 1 > /proc/sys/user/max_user_namespaces && "  # this namespace counts as one
            "exec unshare -U --map-user=1000 --map-group=1000 \"$0\" -c \"$1\"")


@pytest.mark.namespaces
def test_a_kernel_that_refuses_namespaces_is_named_with_the_fix():
    """Inside a user namespace whose limit (1) its own child uses up, the jail's unshare fails
    with ENOSPC: the doctor says the sandbox is unavailable, why, and which sysctl to raise."""
    code = ("from posttrain.cli.doctor import sandbox_check\n"
            "c = sandbox_check()\nprint(c.status, c.ok, sep='|')\nprint(c.detail)\nprint(c.fix)")
    run = subprocess.run(["unshare", "-U", "-r", "sh", "-c", REFUSING, sys.executable, code],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    status, detail, fix = run.stdout.strip().splitlines()[-3:]
    assert status == "unavailable (optional)|True"
    assert "no user namespaces" in detail and "Errno 28" in detail
    assert "sudo sysctl -w user.max_user_namespaces=15000" in fix and fix.endswith(FALLBACK)


def fake_venv(path, init: str = ""):
    """A venv (this interpreter's, no pip) holding a stand-in verifiers 0.4.0 whose
    ``verifiers.v1`` runs ``init``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = subprocess.run([str(path / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    package = path / site / "verifiers"
    (package / "v1").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "v1" / "__init__.py").write_text(init)
    info = package.parent / "verifiers-0.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: verifiers\nVersion: 0.4.0\n")


def test_a_verifiers_venv_is_found_and_a_broken_one_flagged(tmp_path, monkeypatch):
    verifiers = next(lib for lib in LIBRARIES if lib.task == "verifiers")
    venv = tmp_path / "venv"
    fake_venv(venv)
    monkeypatch.setenv("POSTTRAIN_VERIFIERS_VENV", str(venv))
    check = library_check(verifiers)
    assert check.status == "ok", check.detail
    assert check.detail == f"verifiers 0.4.0 in {venv}: task.python={venv}/bin/python"
    (venv / "lib").rename(tmp_path / "lib")  # its site-packages gone
    check = library_check(verifiers)
    assert check.status == "broken" and check.detail == f"{venv} has no verifiers"
    fake_venv(tmp_path / "broken", "raise ImportError('cannot import name X from openai')")
    monkeypatch.setenv("POSTTRAIN_VERIFIERS_VENV", str(tmp_path / "broken"))
    check = library_check(verifiers)
    assert check.status == "broken" and not check.ok and "from openai" in check.detail
    assert check.fix.startswith("rebuild it: bash .ci/verifiers_env.sh")


def test_no_library_python_is_optional_and_says_how_to_build_one(tmp_path, monkeypatch):
    for lib in LIBRARIES:
        monkeypatch.setenv(lib.variable, str(tmp_path / "none"))
        check = library_check(lib)
        assert check.status == "not installed (optional)" and check.ok
        assert f"${lib.variable}={tmp_path / 'none'} has no bin/python" in check.detail
        assert check.fix.startswith(f"bash {lib.script}")
        assert f"task.python: {lib.venv}/bin/python (task.name: {lib.task})" in check.fix
