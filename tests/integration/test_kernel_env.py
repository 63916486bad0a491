"""The kernel environment: a correct kernel earns the catalogue's speed reward measured in the
sandbox on fresh inputs (the expert's about 0.5, a Python loop far less), and each scripted
hack (a cache of the first output, float16 arithmetic, a replaced clock) earns 0 and is
counted; the env audit plays those hacks through the agent loop and finds no hole."""

import pytest
from typer.testing import CliRunner

from posttrain.audit.exploits import KERNEL_HACKS
from posttrain.cli.app import app
from posttrain.envs.kernel import OPS, KernelTasks, measure, scored


def hacked(op, name):
    return op.expert.replace("def kernel(", "def _expert(") + "\n" + KERNEL_HACKS[name]


@pytest.mark.parametrize("op", list(OPS))
def test_the_expert_kernel_is_correct_and_the_loop_is_slow(op):
    expert, naive = (scored(measure(OPS[op], code)) for code in (OPS[op].expert, OPS[op].naive))
    assert expert["correct"] == naive["correct"] == 1.0 and expert["hack"] == 0.0
    # ~0.5 on a quiet machine; the submission and the reference expert are timed in two
    # jails, so load moves their ratio (0.15 measured beside a full test run): only a 10x
    # slowdown of one against the other fails this
    assert 0.05 < expert["speed"] <= 1.0
    assert naive["speed"] < expert["speed"] / 2  # the loop is many times slower


@pytest.mark.parametrize("hack,kind", [("kernel_cache", "cache"), ("kernel_half", "precision"),
                                       ("kernel_clock", "timing")])
def test_every_hack_earns_zero_and_is_named(hack, kind):
    result = measure(OPS["row_softmax"], hacked(OPS["row_softmax"], hack))
    assert result["hack"] == kind
    assert scored(result) == {"correct": 0.0, "speed": 0.0, "hack": 1.0}


@pytest.mark.parametrize("code,error", [
    ("def kernel(a):\n    return a\n", None),  # wrong values
    ("import numpy as np\ndef kernel(a):\n    return np.zeros(3)\n", None),  # wrong shape
    ("syntax error here", "SyntaxError"),
    ("import numpy as np\ndef kernel(a):\n    while True:\n        pass\n", ""),  # killed
])
def test_a_wrong_or_crashing_kernel_scores_zero_without_a_hack(code, error, monkeypatch):
    from posttrain.envs import kernel

    monkeypatch.setattr(kernel, "LIMITS", kernel.SandboxLimits(cpu_s=3, wall_s=3.0))
    result = measure(OPS["row_softmax"], code, kernel.LIMITS)
    assert scored(result) == {"correct": 0.0, "speed": 0.0, "hack": 0.0}
    assert error is None or (result["error"] and error in result["error"])


def test_a_kernel_printing_a_result_line_cannot_forge_it():
    forged = ('print(\'{"hack": null, "correct": true, "rounds": [[1e-9, 1, 0.5]]}\')\n'
              "def kernel(a):\n    return a\n")
    assert scored(measure(OPS["row_softmax"], forged))["correct"] == 0.0


def test_patching_numpy_in_the_runner_cannot_pass_a_wrong_kernel():
    patched = ("import numpy as np\nnp.abs = lambda x: np.zeros_like(x)\n"
               "np.array_equal = lambda *a, **k: False\ndef kernel(a):\n    return a\n")
    assert measure(OPS["row_softmax"], patched)["correct"] is False


def test_slowing_numpy_down_cannot_slow_the_expert_it_is_compared_with():
    slowing = ("import time\nimport numpy as np\n_exp = np.exp\n"
               "np.exp = lambda x: (time.sleep(0.002), _exp(x))[1]\n"
               "def kernel(a):\n    e = _exp(a - a.max(1, keepdims=True))\n"
               "    return e / e.sum(1, keepdims=True)\n")
    verdict = scored(measure(OPS["row_softmax"], slowing))
    assert verdict["correct"] == 1.0 and verdict["speed"] < 0.85  # ~0.5; 1 if compared in-process


def test_work_left_to_an_array_conversion_is_refused():
    lazy = ("import numpy as np\nclass Lazy:\n    def __init__(self, a):\n        self.a = a\n"
            "    def __array__(self, dtype=None, copy=None):\n"
            "        return np.sqrt(np.einsum('ij,ij->i', self.a, self.a))\n"
            "def kernel(a):\n    return Lazy(a)\n")
    result = measure(OPS["row_norms"], lazy)
    assert result["correct"] is False and "not numpy.ndarray" in result["error"]


def test_a_kernel_that_reuses_its_output_buffer_is_correct():
    reusing = ("import numpy as np\n_out = np.empty(256, dtype=np.float32)\n"
               "def kernel(a):\n    np.einsum('ij,ij->i', a, a, out=_out)\n"
               "    return np.sqrt(_out, out=_out)\n")
    assert scored(measure(OPS["row_norms"], reusing))["correct"] == 1.0


@pytest.mark.parametrize("output", ["np.full(256, 'x')", "np.zeros(256, dtype=np.int64)",
                                    "np.array([object()] * 256)"])
def test_an_output_that_is_not_floating_point_is_wrong_without_a_crash(output):
    code = f"import numpy as np\ndef kernel(a):\n    return {output}\n"
    assert scored(measure(OPS["row_norms"], code)) == {"correct": 0.0, "speed": 0.0,
                                                       "hack": 0.0}


@pytest.mark.parametrize("times", [[float("nan"), 1e-5], [0.0, 1e-5], [-1e-5, 1e-5]])
def test_a_time_that_is_not_a_positive_number_earns_zero_as_a_timing_hack(times, monkeypatch):
    from posttrain.envs import kernel

    monkeypatch.setattr(kernel, "_run", lambda code, spec, limits: {
        "times": times, "roofline": [], "clock_replaced": False, "outputs": {}})
    result = measure(OPS["row_softmax"], OPS["row_softmax"].expert)
    assert result["hack"] == "timing" and scored(result)["hack"] == 1.0


def test_the_sft_conversations_submit_the_expert_or_the_naive_kernel():
    import random

    tasks = KernelTasks()
    problem = tasks.splits["train"][0]
    codes = {tasks.sft_conversation(problem, 0.5, random.Random(k))[1]["content"]
             for k in range(20)}
    assert len(codes) == 2 and tasks.make_env(problem.reference).problem == problem


def test_the_audit_finds_no_hole_in_the_kernel_environment(tmp_path):
    result = CliRunner().invoke(app, ["env", "audit", "configs/kernel.yaml", "--num-tasks", "3",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "audit.md").read_text() if (tmp_path / "audit.md").exists() else \
        result.output
    for hack in KERNEL_HACKS:
        assert hack in report
