"""Synthesised tool environments (docs/synthesis.md): a database, tools over it, a task and a
Python verifier, in a directory ``posttrain synthesize`` writes and ``task.name: tool_envs``
trains on.

A directory holds ``env.json`` (``id``, ``task``: the question, ``tools``: OpenAI function
schemas, ``meta``), ``db.json`` (tables: lists of rows), ``tools.py`` (one function per tool,
``NAME(db, **arguments)`` returning JSON), ``verifier.py`` (``verify(db, answer) -> bool``,
``answer`` the final answer's text) and ``solution.py`` (``solve(call)``: the reference
solution, which may only call tools, ``call(name, **arguments)``, and returns the answer).

Everything a builder wrote runs in the sandbox, one jailed process a call, which holds only
the files that call needs; its result comes back as the last line of its output (JSON)."""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.rewards.rule_verifiers import answer_tag
from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits

FILES = ("env.json", "db.json", "tools.py", "verifier.py", "solution.py")
LIMITS = SandboxLimits(cpu_s=5, memory_mb=512, wall_s=10.0, max_output_bytes=64 * 1024)
HOST = """
import json, sys
sys.path.insert(0, ".")
request = json.loads(sys.stdin.read())
calls = []
def call(tool, /, **arguments):
    result = getattr(tools, tool)(table, **arguments)
    calls.append([tool, arguments, result])
    return result
try:
    table = json.load(open("db.json"))
    if request["op"] == "tool":
        import tools
        out = {"ok": True, "result": getattr(tools, request["name"])(table,
                                                                  **request["arguments"])}
    elif request["op"] == "verify":
        import verifier
        out = {"ok": True, "result": [bool(verifier.verify(json.load(open("db.json")), a))
                                      for a in request["answers"]]}
    else:
        import solution, tools
        out = {"ok": True, "result": str(solution.solve(call)), "calls": calls}
except BaseException as e:
    out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
print("\\n" + json.dumps(out, default=str))
"""
FORBIDDEN_NAMES = frozenset({"open", "exec", "eval", "compile", "__import__", "globals",
                             "locals", "vars", "getattr", "setattr", "input", "breakpoint"})


class ToolEnvError(ValueError):
    """A synthesised environment that is malformed or whose code failed."""


@dataclass
class ToolEnvFiles:
    """One environment's files (``FILES``), as text."""

    files: dict[str, str]
    spec: dict = field(init=False)

    def __post_init__(self) -> None:
        missing = [f for f in FILES if not isinstance(self.files.get(f), str)]
        if missing:
            raise ToolEnvError(f"missing {', '.join(missing)}")
        try:
            self.spec = json.loads(self.files["env.json"])
            json.loads(self.files["db.json"])
        except json.JSONDecodeError as e:
            raise ToolEnvError(f"env.json or db.json is not JSON: {e}") from None
        if not isinstance(self.spec.get("task"), str) or not self.spec["task"].strip():
            raise ToolEnvError("env.json needs a task (the question)")
        names = [t.get("function", {}).get("name") for t in self.spec.get("tools") or []]
        if not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ToolEnvError("env.json needs tools, each a function schema with a name")
        for name in ("tools.py", "verifier.py", "solution.py"):
            try:
                ast.parse(self.files[name])
            except SyntaxError as e:
                raise ToolEnvError(f"{name} does not parse: {e}") from None

    @property
    def id(self) -> str:
        return str(self.spec.get("id") or "env")

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.spec["tools"]]

    @classmethod
    def load(cls, directory: str | Path) -> ToolEnvFiles:
        d = Path(directory)
        return cls({f: (d / f).read_text(encoding="utf-8") for f in FILES if (d / f).is_file()})

    def save(self, directory: str | Path) -> None:
        """Write the files into ``directory`` (a new directory, renamed into place whole)."""
        d = Path(directory)
        tmp = d.with_name(d.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        tmp.rename(d)


def tools_only(solution: str, tool_names: list[str]) -> str | None:
    """Why ``solution`` is not a solution that only calls tools (None when it is): it imports
    nothing, names no private attribute or file-reaching builtin, and calls ``call`` with a
    tool's name."""
    tree = ast.parse(solution)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            return "it imports"
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            return f"it uses {node.id}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"it reaches {node.attr}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "call":
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and first.value in tool_names):
                return "it calls something that is not one of its tools by name"
    return None


class ToolEnvRunner:
    """Runs an environment's code in the sandbox: its tools, its verifier and its reference
    solution (``op`` ``tool``, ``verify``, ``solve``)."""

    def __init__(self, env: ToolEnvFiles, limits: SandboxLimits = LIMITS) -> None:
        self.env, self.limits = env, limits

    def _run(self, request: dict, files: tuple[str, ...]) -> dict:
        try:
            with Sandbox({f: self.env.files[f] for f in files}, self.limits) as sandbox:
                r = sandbox.run_python(HOST, stdin=json.dumps(request))
        except (OSError, UnicodeError, SandboxError) as e:
            return {"ok": False, "error": f"the sandbox failed: {type(e).__name__}"}
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            out = None
        if not isinstance(out, dict) or "ok" not in out:
            why = "timed out" if r.timed_out else f"exit code {r.returncode}: {r.stderr[-300:]}"
            return {"ok": False, "error": f"no result ({why})"}
        return out

    def tool(self, name: str, arguments: dict) -> str:
        """The tool's result as the model reads it (JSON), or its error."""
        out = self._run({"op": "tool", "name": name, "arguments": arguments},
                        ("db.json", "tools.py"))
        return json.dumps(out["result"]) if out["ok"] else f"error: {out['error']}"

    def verify(self, answer: str) -> bool | str:
        """The verifier's verdict on ``answer``, or why it gave none (a string)."""
        verdicts = self.verify_all([answer])
        return verdicts if isinstance(verdicts, str) else verdicts[0]

    def verify_all(self, answers: list[str]) -> list[bool] | str:
        """The verifier's verdicts on ``answers``, in one process (each call with the
        database as stored), or why it gave none (a string)."""
        out = self._run({"op": "verify", "answers": answers}, ("db.json", "verifier.py"))
        return out["result"] if out["ok"] else out["error"]

    def solve(self) -> tuple[str, list] | str:
        """``(answer, calls)`` of the reference solution (each call ``[name, arguments,
        result]``), or why it failed (a string)."""
        why = tools_only(self.env.files["solution.py"], self.env.tool_names)
        if why is not None:
            return f"the solution does not only call tools: {why}"
        out = self._run({"op": "solve"}, ("db.json", "tools.py", "solution.py"))
        return (out["result"], out["calls"]) if out["ok"] else out["error"]

    def registry(self) -> ToolRegistry:
        """The tools as the agent loop runs them."""
        def tool_of(schema: dict) -> Tool:
            name = schema["function"]["name"]
            return Tool(lambda **arguments: self.tool(name, arguments),
                        self.limits.wall_s + 5, schema=schema)

        return ToolRegistry([tool_of(s) for s in self.env.spec["tools"]])


@dataclass(frozen=True)
class ToolEnvProblem:
    """One kept environment: its files and its reference solution's trace."""

    env: ToolEnvFiles
    answer: str
    calls: tuple

    @property
    def reference(self) -> str:
        return self.env.id

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.env.spec["task"] + " Give the final answer "
                 "as <answer>...</answer>."}]


class ToolEnvEpisode:
    """One episode's tools and verdict: ``correct`` is the verifier's verdict on the final
    answer (its ``<answer>`` tag, else its text); a verifier that fails scores 0."""

    def __init__(self, problem: ToolEnvProblem) -> None:
        self.runner = ToolEnvRunner(problem.env)
        self.tools = self.runner.registry()

    def verdict(self, final: str) -> dict[str, float]:
        answer = answer_tag(final)
        return {"correct": float(self.runner.verify(answer if answer is not None
                                                    else final.strip()) is True)}

    def close(self) -> None:
        pass


class ToolEnvTasks(SplitTasks):
    """The environments under ``directory`` (each a folder, at any depth, with its files and
    the reference trace in ``env.json``'s ``meta.trace``), split by a hash of their ids."""

    def __init__(self, directory: str | Path, eval_fraction: float = 0.1) -> None:
        dirs = sorted(p.parent for p in Path(directory).rglob("env.json"))
        if not dirs:
            raise ToolEnvError(f"no environment (a folder with env.json) under {directory}")
        self.problems = {}
        for d in dirs:
            env = ToolEnvFiles.load(d)
            trace = env.spec.get("meta", {}).get("trace") or {}
            self.problems[env.id] = ToolEnvProblem(env, str(trace.get("answer", "")),
                                                   tuple(map(tuple, trace.get("calls", []))))
        self.splits = self.split_by_id(self.problems, eval_fraction)

    def make_env(self, reference: str) -> ToolEnvEpisode:
        return ToolEnvEpisode(self.problems[reference])

    def conversation_tools(self, conversation: list[dict]) -> list[dict]:
        """The tool schemas of the environment whose task opens ``conversation``."""
        task = conversation[0]["content"]
        return next(p.env.spec["tools"] for p in self.problems.values()
                    if p.messages()[0]["content"] == task)

    def sft_conversation(self, p: ToolEnvProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """The reference solution's calls with their results, then its answer; with
        probability ``error_rate`` a wrong answer (the right one with a digit changed, or
        ``unknown``) after the same calls."""
        answer = p.answer
        if rng.random() < error_rate:
            digits = [i for i, c in enumerate(answer) if c.isdigit()]
            if digits:
                i = rng.choice(digits)
                answer = answer[:i] + str((int(answer[i]) + 1) % 10) + answer[i + 1:]
            else:
                answer = "unknown"
        calls = [(name, arguments) for name, arguments, _ in p.calls]
        results = [json.dumps(result) for _, _, result in p.calls]
        return p.messages() + tool_turns(calls, results) + [answer_turn(answer)]


@member("task", "tool_envs")
class ToolEnvsConfig(TaskFamily):
    """``tool_envs``: the synthesised tool environments under ``dir`` (``posttrain
    synthesize tools``), each a task answered with its own tools and scored by its own
    verifier (reward part ``correct``, verifier ``env``)."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = ("correct",)
    dir: str = Field(description="the tool environments written by posttrain synthesize tools")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = ToolEnvTasks(self.dir, self.eval_fraction)
        first = next(iter(tasks.problems.values()))
        return TaskParts(tasks, ToolEnvRunner(first.env).registry(), tasks.make_env)
