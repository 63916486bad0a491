"""The prepared GPU check runs its whole code path on the CPU with a tiny policy: the JSON
has every section, its log-prob gaps lie within the rounding bounds of their precisions, and
the resumed step ends on the straight run's weights.
(Routing replay's effect is tested deterministically in test_routing_replay.py; here its
bf16 figures depend on the CPU's kernels.) The ``helpers`` section compares the device with
the CPU, here the CPU with itself, so its zeros are a smoke test: the section runs, and the
helpers answer alike twice; their values are checked in tests/unit/test_devices.py.

The dry run runs as on the GPU machine's image (``benchmarks/gpu_kit.py emulate``): what
posttrain needs and the image lacks is hidden but the kit's wheels, so the kit is complete."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EPS32, EPS_BF16 = torch.finfo(torch.float32).eps, torch.finfo(torch.bfloat16).eps


def rounding_bound(eps: float, section: dict) -> float:
    """docs/testing.md: two forward computations in different orders differ by at most
    16 ``eps`` of the largest |log-prob| compared (about eight chained reductions)."""
    return 16 * eps * section["largest_logprob"]


def emulated(*command: str, without: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    options = ["--without", *without] if without else []
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_kit.py"), "emulate",
                           *options, "--", sys.executable, *command], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)  # a hang guard: ~260 s alone


@pytest.mark.parametrize("dist, module", [("math-verify", "math_verify"),
                                          ("rank-bm25", "rank_bm25"),
                                          ("jsonschema", "jsonschema")])
def test_the_emulated_image_lacks_what_the_kit_does_not_carry(dist, module):
    """The emulation can fail: a requirement of posttrain that the image lacks is hidden once
    its wheel leaves the kit (the kit carries every one now)."""
    assert emulated("-c", f"import {module}").returncode == 0
    out = emulated("-c", f"import {module}", without=(dist,))
    assert out.returncode != 0 and "the GPU image lacks" in out.stderr


def test_the_gpu_check_dry_runs_on_cpu():
    out = emulated(str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--tiny")
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert set(report) >= {"grpo", "gap", "routing_replay", "resume", "sleep", "helpers"}
    errors = {k: v["error"] for k, v in report.items() if isinstance(v, dict) and "error" in v}
    assert not errors, errors
    assert report["grpo"]["generation_tokens_per_s"] > 0
    # bf16 engine vs bf16 trainer on the engine's own samples: within bf16 rounding
    assert report["grpo"]["mismatch"] <= rounding_bound(EPS_BF16, report["grpo"])
    # fp32 vs bf16 trainer: more than fp32 rounding can explain (bf16 ran), within bf16's
    gap = report["gap"]
    assert rounding_bound(EPS32, gap) < gap["fp32_vs_bf16_mean"] <= rounding_bound(EPS_BF16, gap)
    assert set(report["routing_replay"]) == {"qwen3_moe", "qwen3_moe_replay", "qwen3"}
    assert report["resume"]["max_weight_difference"] == 0.0
    slept = report["sleep"]
    assert slept["freed_bytes"] == slept["weights_bytes"] == slept["held_after_sync"] > 0
    assert slept["mismatch_after_sync"] <= rounding_bound(EPS32, slept)  # fp32 both sides
    # smoke only: the CPU against itself (the same code on the same inputs: exactly 0)
    assert report["helpers"] == {"reward_model": 0.0, "teacher_score": 0.0,
                                 "teacher_distributions": 0.0}
    # the MTP head learned under bf16 autocast, and its drafts were accepted at times
    spec = report["speculative"]
    assert spec["mtp_loss_last"] < spec["mtp_loss_first"]
    assert 0 < spec["acceptance_rate"] <= 1 and spec["tokens_per_forward"] >= 1
    # quick instructions from the cache: what separate requests prefill, less one or two a
    # question; the answers mostly theirs (bf16 near ties may differ)
    for at, q in report["quick"].items():
        assert q["prefill_saved"] == q["prefill_separate"] - q["prefill_quick"], at
        assert q["same_answers"] > 0, at
    # TRL's GRPOTrainer ran from the kit's wheels beside posttrain's step
    trl = report["trl"]
    assert "trl_error" not in trl and trl["trl_step_s"] > 0 and trl["posttrain_step_s"] > 0
