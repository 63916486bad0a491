"""The prepared GPU check runs its whole code path on the CPU with a tiny policy: the JSON
has every section with sane values, and the resumed step ends on the straight run's weights.
(Routing replay's effect is tested deterministically in test_routing_replay.py; here its
bf16 figures depend on the CPU's kernels.) The ``helpers`` section compares the device with
the CPU, here the CPU with itself, so its zeros are a smoke test: the section runs, and the
helpers answer alike twice; their values are checked in tests/unit/test_devices.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_dry_runs_on_cpu():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"),
                          "--device", "cpu", "--tiny"], capture_output=True, text=True,
                         timeout=300, check=True)
    report = json.loads(out.stdout)
    assert set(report) >= {"grpo", "gap", "routing_replay", "resume", "sleep", "helpers"}
    assert report["grpo"]["generation_tokens_per_s"] > 0
    assert report["grpo"]["mismatch"] < 0.05  # bf16 engine vs bf16 trainer, on-policy
    assert 1e-5 < report["gap"]["fp32_vs_bf16_mean"] < 1e-1
    assert set(report["routing_replay"]) == {"qwen3_moe", "qwen3_moe_replay", "qwen3"}
    assert report["resume"]["max_weight_difference"] == 0.0
    slept = report["sleep"]
    assert slept["freed_bytes"] == slept["weights_bytes"] == slept["held_after_sync"] > 0
    assert slept["mismatch_after_sync"] < 1e-5
    # smoke only: the CPU against itself (the same code on the same inputs: exactly 0)
    assert report["helpers"] == {"reward_model": 0.0, "teacher_score": 0.0,
                                 "teacher_distributions": 0.0}
