"""The kernel-optimisation environment (``task.name: kernel``; Kimi K3's kernel reward,
docs/agents.md "Kernel environment"): write a fast numpy function for an operation.

The model submits a module defining ``kernel`` with the ``submit_kernel`` tool. The host draws
fresh random float32 inputs for every call (``ROUNDS`` rounds of ``REPEATS`` calls, from the
operating system's entropy) and a jailed runner imports the module and times each call. The
outputs come back to the host, which checks every one against its own float64 reference
within float32's bound. The expert implementation and the roofline (one pass that reads every
input and writes an output of the result's size) are timed on the same inputs in a second
jailed run that never sees the submission. Each round's time is its fastest call. The reward
is ``kernel_speed`` of the catalogue: 0.5 at the expert's speed, 1 at the roofline's, 0 for a
wrong kernel.

Three hacks earn 0 and are counted as the part ``hack``:
- ``cache``: an output equal to an earlier call's (every call's input is new);
- ``precision``: a result in another dtype, or within a half-precision bound but not float32's;
- ``timing``: the module replaced the clock, or the times are not positive finite numbers. The
  runner timed with its own clock, bound before the import, so the module's reports are never
  read.

The kernel must return a ``numpy.ndarray`` (an object converted later would compute outside
the clock); each output is copied as the call returns. The runner reads its inputs and a
nonce before the import and keeps them, and the functions it writes with, in one function's
frame. Its result line must start with the nonce and goes out through a descriptor it held
before the import, after which it exits at once: no exit handler or thread of the module's
runs after it. A module that introspects the interpreter (``sys._getframe``, ``gc``) or
patches the standard library's internals to rewrite what the runner reports is not caught;
the outputs must still be right for the host's inputs, and the jail is the boundary that
holds."""

from __future__ import annotations

import base64
import io
import json
import math
import random
import secrets
from dataclasses import dataclass
from typing import ClassVar

from posttrain.algos import get
from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits

ROUNDS, REPEATS, BOUND = 2, 10, 1e-4  # BOUND: the largest relative error of a float32 kernel
LIMITS = SandboxLimits(cpu_s=20, memory_mb=1024, wall_s=30.0, max_output_bytes=4 * 1024 * 1024)
PARTS = ("correct", "speed", "hack")


@dataclass(frozen=True)
class Op:
    """An operation: its inputs' shapes, the float64 reference and implementations (code of a
    module defining ``kernel``): the ``expert``'s, and a ``naive`` one with Python loops."""

    name: str
    what: str
    shapes: tuple[tuple[int, ...], ...]
    reference: str  # an expression of the float64 inputs a, b, ...
    expert: str
    naive: str

    @property
    def reference_fn(self) -> str:
        args = ", ".join("abcd"[: len(self.shapes)])
        return f"def reference({args}):\n    return {self.reference}\n"


OPS = {op.name: op for op in (
    Op("row_softmax", "the softmax of each row of a", ((64, 128),),
       "np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(1, "
       "keepdims=True)",
       "import numpy as np\ndef kernel(a):\n    e = np.exp(a - a.max(1, keepdims=True))\n"
       "    return e / e.sum(1, keepdims=True)\n",
       "import numpy as np\ndef kernel(a):\n    out = np.empty_like(a)\n"
       "    for i in range(len(a)):\n        e = np.exp(a[i] - a[i].max())\n"
       "        out[i] = e / e.sum()\n    return out\n"),
    Op("row_norms", "the Euclidean norm of each row of a", ((256, 64),),
       "np.sqrt((a * a).sum(1))",
       "import numpy as np\ndef kernel(a):\n    return np.sqrt(np.einsum('ij,ij->i', a, a))\n",
       "import numpy as np\ndef kernel(a):\n"
       "    return np.array([np.sqrt(sum(float(v) * float(v) for v in row)) for row in a],\n"
       "                    dtype=a.dtype)\n"),
    Op("sq_dists", "the squared Euclidean distance between every row of a and every row of b",
       ((48, 16), (48, 16)), "((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)",
       "import numpy as np\ndef kernel(a, b):\n"
       "    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)\n",
       "import numpy as np\ndef kernel(a, b):\n"
       "    out = np.empty((len(a), len(b)), dtype=a.dtype)\n"
       "    for i in range(len(a)):\n        for j in range(len(b)):\n"
       "            out[i, j] = ((a[i] - b[j]) ** 2).sum()\n    return out\n"),
)}

RUNNER = """
import base64, binascii, io, json, os, sys, time

def main(clock=time.perf_counter, wall=time.time, dumps=json.dumps, b64=binascii.b2a_base64,
         write=os.write, fd=os.dup(1), leave=os._exit):
    spec = json.loads(sys.stdin.readline())
    import numpy as np
    ndarray, copy, tobytes = np.ndarray, np.ndarray.copy, np.ndarray.tobytes
    inputs = np.load(io.BytesIO(base64.b64decode(spec["inputs"])))
    calls = [[[inputs[f"{r}_{k}_{i}"] for i in range(spec["arity"])]
              for k in range(spec["repeats"])] for r in range(spec["rounds"])]
    result, outputs = {"times": [], "roofline": []}, []
    try:
        sys.path.insert(0, ".")
        import solution
        for round_calls in calls:
            times = []
            for args in round_calls:
                start = clock(); out = solution.kernel(*args); times.append(clock() - start)
                if type(out) is not ndarray:  # an __array__ would compute outside the clock
                    raise TypeError(f"kernel returned {type(out).__name__}, not numpy.ndarray")
                outputs.append(copy(out))  # before the next call may reuse its buffer
            result["times"].append(min(times))
            if spec["roofline"]:
                roofs = []
                for args in round_calls:
                    out = np.empty_like(outputs[-1])
                    start = clock(); [x.sum() for x in args]; out.fill(0.0)
                    roofs.append(clock() - start)
                result["roofline"].append(min(roofs))
    except BaseException as e:
        result["error"] = f"{type(e).__name__}: {e}"[:200]
    result["clock_replaced"] = time.perf_counter is not clock or time.time is not wall
    result["outputs"] = [[o.dtype.str, list(o.shape), b64(tobytes(o), newline=False).decode()]
                         for o in outputs]
    line = (spec["nonce"] + dumps(result) + "\\n").encode()
    while line:
        line = line[write(fd, line):]
    leave(0)  # no exit handler or thread of the module's runs after the result

main()
"""


@dataclass(frozen=True)
class KernelProblem:
    """A task: write ``op`` (``reference`` is its name)."""

    op: Op

    @property
    def reference(self) -> str:
        return self.op.name

    @property
    def domain(self) -> str:
        return "kernel"

    def messages(self) -> list[dict]:
        args = ", ".join("abcd"[: len(self.op.shapes)])
        shapes = ", ".join(f"{n} of shape {s}" for n, s in zip(args, self.op.shapes))
        return [{"role": "user", "content": f"Write kernel({args}) returning {self.op.what} "
                 f"({shapes}, float32) with numpy, as fast as you can, and submit it."}]


def _run(code: str, spec: dict, limits: SandboxLimits) -> dict:
    """One jailed run of ``RUNNER`` on ``code``: its result with ``outputs`` decoded to arrays,
    or ``{"error": ...}`` when it printed no well-formed result line."""
    import numpy as np

    nonce = spec["nonce"]
    try:
        with Sandbox({"solution.py": code}, limits) as sandbox:
            r = sandbox.run_python(RUNNER, stdin=json.dumps(spec) + "\n")
    except (OSError, UnicodeError, SandboxError) as e:
        return {"error": type(e).__name__}
    line = next((s for s in reversed(r.stdout.splitlines()) if s.startswith(nonce)), None)
    if line is None:
        return {"error": "timed out" if r.timed_out else
                r.stderr[-200:] or f"exit code {r.returncode}"}
    try:
        result = json.loads(line[len(nonce):])
        times, roofline = result["times"], result["roofline"]
        if not (isinstance(times, list) and isinstance(roofline, list)
                and all(type(t) is float for t in times + roofline)
                and type(result["clock_replaced"]) is bool):
            raise ValueError("malformed result")
        result["outputs"] = [np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype))
                             .reshape(shape) for dtype, shape, data in result["outputs"]]
    except (ValueError, TypeError, KeyError) as e:  # JSON, base64, dtype, shape
        return {"error": f"unreadable result: {type(e).__name__}"}
    return result


def _checked(op: Op, calls: list, outputs: list) -> tuple[bool, str | None]:
    """(every output right, the hack found) for the submission's ``outputs`` of ``calls``, in
    call order; an output that is not floating point is wrong."""
    import numpy as np

    seen, reference = [], {}
    exec("import numpy as np\n" + op.reference_fn, reference)
    flat = [args for round_calls in calls for args in round_calls]
    if len(outputs) != len(flat):
        return False, None
    for args, got in zip(flat, outputs):
        want = reference["reference"](*[a.astype(np.float64) for a in args])
        if got.shape != want.shape or got.dtype.kind != "f":
            return False, None
        if any(np.array_equal(got, s) for s in seen):
            return False, "cache"
        seen.append(got)
        err = np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30)
        if got.dtype != np.float32 or BOUND < err <= 1e-2:
            return False, "precision"
        if not err <= BOUND:
            return False, None
    return True, None


def measure(op: Op, code: str, limits: SandboxLimits = LIMITS) -> dict:
    """The verdict on ``code``: ``correct``, ``hack`` (None, cache, precision, timing),
    ``rounds`` ([seconds, expert seconds, roofline seconds] each) and ``error``."""
    import numpy as np

    rng = np.random.default_rng()
    calls = [[[rng.standard_normal(s).astype(np.float32) for s in op.shapes]
              for _ in range(REPEATS)] for _ in range(ROUNDS)]
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{r}_{k}_{i}": x for r, c in enumerate(calls)
                        for k, args in enumerate(c) for i, x in enumerate(args)})
    spec = {"inputs": base64.b64encode(buffer.getvalue()).decode(), "arity": len(op.shapes),
            "rounds": ROUNDS, "repeats": REPEATS}
    verdict = {"correct": False, "hack": None, "rounds": []}
    mine = _run(code, {**spec, "roofline": False, "nonce": secrets.token_hex(8)}, limits)
    if mine.get("error"):
        return {**verdict, "error": mine["error"]}
    times = mine["times"]
    if mine["clock_replaced"] or not all(math.isfinite(t) and t > 0 for t in times):
        return {**verdict, "hack": "timing"}
    verdict["correct"], verdict["hack"] = _checked(op, calls, mine["outputs"])
    if not verdict["correct"]:
        return verdict
    expert = _run(op.expert, {**spec, "roofline": True, "nonce": secrets.token_hex(8)}, limits)
    if expert.get("error"):
        return {**verdict, "correct": False, "error": f"expert: {expert['error']}"}
    verdict["rounds"] = [list(t) for t in zip(times, expert["times"], expert["roofline"])]
    return verdict


def scored(result: dict) -> dict[str, float]:
    """``correct``, ``speed`` (``kernel_speed`` on the rounds' median times; the roofline
    taken at most 0.9 of the expert's time, so the two never meet) and ``hack``."""
    import torch  # here: validating a config that names this task never imports torch

    ok = bool(result["correct"]) and result["hack"] is None and result["rounds"]
    if not ok:
        return {"correct": 0.0, "speed": 0.0, "hack": float(result["hack"] is not None)}
    t, t_e, t_r = (torch.tensor(sorted(col)[len(col) // 2], dtype=torch.float64)
                   for col in zip(*result["rounds"]))
    speed = get("reward", "kernel_speed")(
        seconds=t[None], correct=torch.ones(1, dtype=torch.bool), expert_seconds=t_e[None],
        roofline_seconds=torch.minimum(t_r, 0.9 * t_e)[None])
    return {"correct": 1.0, "speed": float(speed), "hack": 0.0}


class KernelEnv:
    """One episode: the ``submit_kernel`` tool keeps the last module submitted; the verdict
    measures it once."""

    def __init__(self, problem: KernelProblem) -> None:
        self.problem, self.code, self.result = problem, None, None
        self.tools = ToolRegistry([Tool(self._submit_tool(), LIMITS.wall_s + 5)])

    def _submit_tool(self):
        def submit_kernel(code: str) -> str:
            """Submit the module that defines kernel; the last submission is measured.

            Args:
                code: The module's source.
            """
            self.code = code
            return "submitted"

        return submit_kernel

    def verdict(self, final: str) -> dict[str, float]:
        if self.code is None:
            return {"correct": 0.0, "speed": 0.0, "hack": 0.0}
        self.result = measure(self.problem.op, self.code)
        return scored(self.result)

    def close(self) -> None:
        pass


class KernelTasks(SplitTasks):
    """Every operation of ``OPS`` in both splits (the task is the operation; the inputs are
    fresh every run)."""

    def __init__(self) -> None:
        problems = [KernelProblem(op) for op in OPS.values()]
        self.splits = {"train": problems, "eval": problems}

    def eval_set(self, n: int) -> list:
        return [self.splits["eval"][k % len(OPS)] for k in range(n)]

    def make_env(self, reference: str) -> KernelEnv:
        return KernelEnv(KernelProblem(OPS[reference]))

    @property
    def tools(self) -> ToolRegistry:
        return KernelEnv(next(iter(self.splits["train"]))).tools

    def sft_conversation(self, p: KernelProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """Submit the naive implementation with probability ``error_rate``, else the
        expert's, then finish."""
        code = p.op.naive if rng.random() < error_rate else p.op.expert
        return [*p.messages(), *tool_turns([("submit_kernel", {"code": code})], ["submitted"]),
                answer_turn("submitted")]


@member("task", "kernel")
class KernelConfig(TaskFamily):
    """``kernel``: write a fast numpy ``kernel`` for an operation and submit it with
    ``submit_kernel``; its environment scores ``correct``, ``speed`` (0.5 at the expert
    implementation's speed, 1 at the roofline's) and ``hack`` (1 for a cached, reduced-
    precision or clock-patching kernel, which scores 0)."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = PARTS

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = KernelTasks()
        return TaskParts(tasks, tasks.tools, tasks.make_env)
