"""The code environment: write a function into a small module, in a sandbox.

Each episode owns a ``Sandbox`` workspace holding ``solution.py`` (an existing ``double``
function and a stub of the function to write) and ``tests_public.json``. The model has two
tools: ``run_python`` (run code in the workspace) and ``submit`` (run the public tests on the
module, read the feedback). Tests run the submitted module alone, in a fresh sandbox. Hidden
tests decide the reward on the last submission, SWE-style: fail-to-pass (``f2p``: the new
function, failing on the stub) and pass-to-pass (``p2p``: ``double``, which must keep
working). The hidden expected values never enter the sandbox: the jailed runner only reports
what each call returned, and the comparison happens outside."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.harness.verifier import SubmissionPolicy, Submissions
from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits

HELPER = "def double(x):\n    return 2 * x\n"
RUNNER = """
import json, sys
sys.path.insert(0, ".")
calls = json.loads(sys.stdin.read())
try:
    import solution
    failed = None
except BaseException as e:
    failed = f"import failed: {type(e).__name__}: {e}"
out = []
for call in calls:
    if failed:
        out.append([False, failed])
        continue
    try:
        out.append([True, repr(eval(call, vars(solution)))])
    except BaseException as e:
        out.append([False, f"raised {type(e).__name__}: {e}"])
print(json.dumps(out))
"""
LIMITS = SandboxLimits(cpu_s=5, memory_mb=512, wall_s=10.0, max_output_bytes=16 * 1024)
ENV_PARTS = ("correct", "f2p", "p2p")  # the hidden tests' parts
VERDICT_PARTS = (*ENV_PARTS, "submissions")

# family -> (signature, description, solution body, input maker)
FAMILIES: dict[str, tuple[str, str, str, Callable[[random.Random], str]]] = {
    "affine": ("f(x)", "multiplies x by {k} and adds {c}", "return x * {k} + {c}",
               lambda r: str(r.randint(-20, 20))),
    "repeat": ("f(s)", "returns the string s repeated {k} times", "return s * {k}",
               lambda r: repr(r.choice(["ab", "x", "hey", ""]))),
    "count": ("f(xs)", "returns how many numbers in the list xs are greater than {c}",
              "return sum(1 for v in xs if v > {c})",
              lambda r: str([r.randint(-10, 10) for _ in range(r.randint(0, 5))])),
    "clip": ("f(x)", "returns x limited to the range {c} to {c_hi}",
             "return max({c}, min({c_hi}, x))", lambda r: str(r.randint(-30, 30))),
}


def module(signature: str, body: str) -> str:
    """``solution.py``: the existing ``double`` and the function to write."""
    return f"{HELPER}\n\ndef {signature}:\n    {body}\n"


def expected(source: str, calls) -> tuple[tuple[str, str], ...]:
    """``(call, repr(value))`` of each call on a trusted module ``source`` (ours)."""
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - our own templates, never model output
    return tuple((call, repr(eval(call, namespace))) for call in calls)  # noqa: S307


P2P = expected(HELPER, ("double(3)", "double(-4)"))


@dataclass(frozen=True)
class CodeProblem:
    """One function to write: ``public`` and hidden ``f2p`` calls with their expected reprs."""

    name: str
    signature: str
    description: str
    body: str
    public: tuple[tuple[str, str], ...]
    f2p: tuple[tuple[str, str], ...]

    @property
    def reference(self) -> str:
        return self.name

    @property
    def stub(self) -> str:
        return module(self.signature, "raise NotImplementedError")

    @property
    def solution(self) -> str:
        return module(self.signature, self.body)

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": f"In solution.py write {self.signature}: it "
                 f"{self.description}. Keep double working; submit the whole module."}]


def make_problem(name: str, rng: random.Random) -> CodeProblem:
    family = rng.choice(sorted(FAMILIES))
    signature, description, body, make_input = FAMILIES[family]
    c = rng.randint(-5, 9)
    values = {"k": rng.randint(2, 5), "c": c, "c_hi": c + rng.randint(3, 12)}
    body = body.format(**values)
    while True:  # public and hidden calls that no constant answer passes
        cases = expected(module(signature, body), [f"f({make_input(rng)})" for _ in range(6)])
        if len({e for _, e in cases[:2]}) == 2 and len({e for _, e in cases[2:]}) > 1:
            break
    return CodeProblem(name, signature, description.format(**values), body, cases[:2], cases[2:])


def compare(cases, out) -> list[tuple[bool, str]]:
    """``(passed, message)`` of each ``(call, expected repr)`` case against the runner's
    ``[ran, repr or error]``."""
    return [(ok and got == want, "" if ok and got == want else
             f"{call}: {f'returned {got}, expected {want}' if ok else got}")
            for (call, want), (ok, got) in zip(cases, out)]


def runner_output(stdout: str, n: int) -> list | None:
    """The runner's last line if it is ``n`` pairs ``[ran, repr or error]``, else None (the
    module printed after it, or the run died)."""
    try:
        out = json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return None
    pairs = isinstance(out, list) and len(out) == n and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], bool) and isinstance(p[1], str)
        for p in out)
    return out if pairs else None


def feedback(results: list[tuple[bool, str]]) -> str:
    """What ``submit`` tells the model: the count passed and each failure."""
    failures = [m for ok, m in results if not ok]
    return f"{len(results) - len(failures)}/{len(results)} public tests passed" + (
        "; " + "; ".join(failures) if failures else "")


class CodeEnv:
    """One episode's sandbox, its ``run_python`` and ``submit`` tools and its verdict. The
    sandbox starts on the first tool call."""

    def __init__(self, problem: CodeProblem, policy: SubmissionPolicy = SubmissionPolicy(),
                 limits: SandboxLimits = LIMITS) -> None:
        self.problem, self.limits = problem, limits
        self._sandbox: Sandbox | None = None
        self.submissions = Submissions(self._public, self._hidden, ENV_PARTS, policy)
        timeout = limits.wall_s + 5  # the sandbox's own limit ends a run first
        self.tools = ToolRegistry([Tool(self._run_python_tool(), timeout),
                                   Tool(self.submissions.tool(), timeout)])

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            public = [{"call": c, "expected": e} for c, e in self.problem.public]
            self._sandbox = Sandbox({"solution.py": self.problem.stub,
                                     "tests_public.json": json.dumps(public)}, self.limits)
        return self._sandbox

    def _run_python_tool(self) -> Callable[[str], str]:
        def run_python(code: str) -> str:
            """Run Python code in the workspace (solution.py and tests_public.json are there).

            Args:
                code: The program; its output is returned.
            """
            r = self.sandbox.run_python(code)
            status = "timed out" if r.timed_out else f"exit code {r.returncode}"
            return f"{status}\n{r.stdout}{r.stderr}".rstrip()

        return run_python

    def _results(self, solution: str, cases) -> list[tuple[bool, str]]:
        """``(passed, message)`` per case. The submitted module runs alone in a fresh sandbox
        (nothing the episode wrote can shadow it); the jailed runner returns values, compared
        here. Whatever goes wrong fails every case, never the rollout."""
        try:
            with Sandbox({"solution.py": solution}, self.limits) as sandbox:
                r = sandbox.run_python(RUNNER, stdin=json.dumps([c for c, _ in cases]))
        except (OSError, UnicodeError, SandboxError) as e:  # e.g. text that cannot be written
            return [(False, f"the tests could not run: {type(e).__name__}")] * len(cases)
        out = runner_output(r.stdout, len(cases))
        if out is None:
            reason = "timed out" if r.timed_out else f"the tests crashed: {r.stderr[-200:]}"
            return [(False, reason)] * len(cases)
        return compare(cases, out)

    def _public(self, solution: str) -> str:
        return feedback(self._results(solution, self.problem.public))

    def _hidden(self, solution: str) -> dict[str, float]:
        results = self._results(solution, (*self.problem.f2p, *P2P))
        f2p_ok = [ok for ok, _ in results[: len(self.problem.f2p)]]
        p2p_ok = [ok for ok, _ in results[len(self.problem.f2p):]]
        return {"correct": float(all(f2p_ok) and all(p2p_ok)),
                "f2p": sum(f2p_ok) / len(f2p_ok), "p2p": sum(p2p_ok) / len(p2p_ok)}

    def verdict(self, final: str) -> dict[str, float]:
        return self.submissions.verdict()

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


class CodeTasks(SplitTasks):
    """``n_problems`` generated problems (named ``code-<i>``), the last ``eval_fraction`` of
    them held out; ``make_env(reference)`` gives an episode its ``CodeEnv``."""

    def __init__(self, seed: int = 0, eval_fraction: float = 0.1, n_problems: int = 2000,
                 policy: SubmissionPolicy = SubmissionPolicy()) -> None:
        n_eval = self.held_out(n_problems, eval_fraction)
        rng = random.Random(f"code:{seed}")
        self.problems = {f"code-{i}": make_problem(f"code-{i}", rng) for i in range(n_problems)}
        problems = list(self.problems.values())
        self.splits = {"train": problems[:-n_eval], "eval": problems[-n_eval:]}
        self.policy = policy

    def make_env(self, reference: str) -> CodeEnv:
        return CodeEnv(self.problems[reference], self.policy)

    @property
    def tools(self) -> ToolRegistry:
        """The tools every episode gets, bound to an environment that never runs: what the
        model is shown (episodes use their own ``make_env`` tools)."""
        return CodeEnv(next(iter(self.problems.values())), self.policy).tools

    def sft_conversation(self, p: CodeProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """Submit the solution and finish; with probability ``error_rate`` first submit a wrong
        one (the constant off by one, or ``return None`` where that still passes the public
        tests), read the failing public tests and fix it. Tool turns
        carry the feedback the tools give (no sandbox needed: the outcome is known)."""
        turns, limit = [], self.policy.max_submissions
        if rng.random() < error_rate:
            calls = [c for c, _ in p.public]
            for body in (_off_by_one(p.body), "return None"):  # the first that fails a test
                wrong = module(p.signature, body)
                results = compare(p.public, [(True, got) for _, got in expected(wrong, calls)])
                if not all(ok for ok, _ in results):
                    break
            turns += tool_turns([("submit", {"solution": wrong})],
                                [f"submission 1/{limit}: {feedback(results)}"])
        passed = feedback([(True, "")] * len(p.public))
        turns += tool_turns([("submit", {"solution": p.solution})],
                            [f"submission {len(turns) // 2 + 1}/{limit}: {passed}"])
        return p.messages() + turns + [{"role": "assistant", "content": "Submitted."}]


def _off_by_one(body: str) -> str:
    """The body with its last integer constant raised by one."""
    head, _, tail = body.rpartition(" ")
    number = tail.rstrip(")")
    return f"{head} {int(number) + 1}{tail[len(number):]}" if number.lstrip("-").isdigit() \
        else body + " + 1"


@member("task", "code")
class CodeConfig(TaskFamily):
    """``code``: write a function in a sandbox with the ``run_python`` and ``submit`` tools; hidden
    tests decide the reward parts ``correct``, ``f2p``, ``p2p`` and ``submissions`` (verifier
    ``env``). ``submissions`` caps submissions, each after the first costing ``penalty``."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = VERDICT_PARTS
    submissions: SubmissionPolicy = Field(
        SubmissionPolicy(),
        description="the submission cap and the penalty of each submission after the first")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = CodeTasks(seed, self.eval_fraction, policy=self.submissions)
        return TaskParts(tasks, tasks.tools, tasks.make_env)
