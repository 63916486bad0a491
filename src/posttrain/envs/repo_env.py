"""Code tasks from a repository's history as an environment (``task.name: repo_tasks``;
``posttrain synthesize repo`` builds them, docs/synthesis.md): the model works in a sandbox
holding the task's workspace (the base commit's tree) with ``read_file``, ``write_file`` and
``run_tests`` (the workspace's own tests), and ends with a final answer; then the hidden tests
(the commit's) replace the workspace's, and the fail-to-pass and pass-to-pass tests decide
``correct`` (all pass), ``f2p`` and ``p2p`` (the shares passing).

Tests are plain functions ``test_*`` in ``tests/test_*.py``, run by a small runner (no test
framework needed); a test passes when it returns without raising."""

from __future__ import annotations

import json
import random
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits

LIMITS = SandboxLimits(cpu_s=20, memory_mb=512, wall_s=30.0, max_output_bytes=256 * 1024)
RUNNER = """
import importlib, json, pathlib, sys
sys.path.insert(0, ".")
sys.dont_write_bytecode = True
results = {}
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    name = "tests." + path.stem
    try:
        module = importlib.import_module(name)
    except BaseException as e:
        results[name] = f"import failed: {type(e).__name__}"
        continue
    for attr in sorted(vars(module)):
        if attr.startswith("test_") and callable(getattr(module, attr)):
            try:
                getattr(module, attr)()
                results[f"{name}::{attr}"] = "pass"
            except BaseException as e:
                results[f"{name}::{attr}"] = f"fail: {type(e).__name__}"
print("\\n" + json.dumps(results))
"""


PARTS = ("correct", "f2p", "p2p")


def run_tests(files: dict[str, str]) -> dict[str, str] | str:
    """Test id -> ``pass`` or why it failed, for a tree ``files``; or why nothing ran."""
    try:
        with Sandbox(files, LIMITS) as sandbox:
            r = sandbox.run_python(RUNNER)
    except (OSError, UnicodeError, SandboxError) as e:
        return f"the sandbox failed: {type(e).__name__}"
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return "timed out" if r.timed_out else f"the tests did not run: {r.stderr[-200:]}"


def apply_patch(files: dict[str, str], patch: str) -> dict[str, str] | str:
    """``files`` with ``patch`` applied (``git apply`` in a scratch directory), or why not."""

    with tempfile.TemporaryDirectory() as d:
        for path, text in files.items():
            (Path(d) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(d) / path).write_text(text, encoding="utf-8")
        done = subprocess.run(["git", "apply", "-"], cwd=d, input=patch, text=True,
                              capture_output=True)
        if done.returncode:
            return f"the patch does not apply: {done.stderr.strip()[:200]}"
        return {str(p.relative_to(d)): p.read_text(encoding="utf-8")
                for p in Path(d).rglob("*") if p.is_file()}


def is_test(path: str) -> bool:
    return path.startswith("tests/")


def files_under(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative path -> text)."""
    return {str(p.relative_to(directory)): p.read_text(encoding="utf-8")
            for p in sorted(directory.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class RepoTask:
    """One packaged task: its ``task.json``, workspace, hidden tests and patch."""

    meta: dict
    workspace: dict[str, str]
    hidden: dict[str, str]
    patch: str

    @classmethod
    def load(cls, directory: str | Path) -> RepoTask:
        d = Path(directory)
        return cls(json.loads((d / "task.json").read_text()), files_under(d / "workspace"),
                   files_under(d / "hidden"), (d / "patch.diff").read_text())

    @property
    def reference(self) -> str:
        return self.meta["id"]

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": f"{self.meta['statement']}. Change the code in the "
                 "workspace (its tests may help), then say Done."}]

    def score(self, code: dict[str, str]) -> dict[str, float]:
        """The reward parts of a workspace ``code`` (its tests replaced by the hidden ones)."""
        mine = {p: t for p, t in code.items() if not is_test(p)}
        results = run_tests({**mine, **self.hidden})
        results = {} if isinstance(results, str) else results
        f2p = [results.get(t) == "pass" for t in self.meta["f2p"]]
        p2p = [results.get(t) == "pass" for t in self.meta["p2p"]]
        return {"correct": float(all(f2p) and all(p2p)), "f2p": sum(f2p) / len(f2p),
                "p2p": sum(p2p) / len(p2p) if p2p else 1.0}


class RepoEnv:
    """One episode's sandbox (started on first use), its tools and its verdict."""

    def __init__(self, task: RepoTask) -> None:
        self.task, self._sandbox = task, None
        self.tools = ToolRegistry([Tool(self._read_tool()), Tool(self._write_tool()),
                                   Tool(self._run_tests_tool(), LIMITS.wall_s + 5)])

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(self.task.workspace, LIMITS)
        return self._sandbox

    def _read_tool(self):
        def read_file(path: str) -> str:
            """Read a file of the workspace.

            Args:
                path: Its path, relative to the workspace (e.g. pkg/core.py).
            """
            try:
                return self.sandbox.read(path)
            except (OSError, ValueError) as e:
                return f"error: {e}"

        return read_file

    def _write_tool(self):
        def write_file(path: str, content: str) -> str:
            """Write a file of the workspace, replacing it.

            Args:
                path: Its path, relative to the workspace.
                content: The whole new text of the file.
            """
            try:
                self.sandbox.write(path, content)
            except (OSError, ValueError) as e:
                return f"error: {e}"
            return f"wrote {path}"

        return write_file

    def _run_tests_tool(self):
        def run_tests_tool() -> str:
            """Run the workspace's tests (tests/test_*.py) and list each one's result."""
            results = run_tests(self._files())
            return results if isinstance(results, str) else "\n".join(
                f"{t}: {v}" for t, v in sorted(results.items()))

        run_tests_tool.__name__ = "run_tests"
        return run_tests_tool

    def _files(self) -> dict[str, str]:
        return files_under(self.sandbox.workspace)

    def verdict(self, final: str) -> dict[str, float]:
        try:
            return self.task.score(self._files())
        except (OSError, UnicodeError, SandboxError):  # whatever the episode left: it failed
            return dict.fromkeys(PARTS, 0.0)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


class RepoTasks(SplitTasks):
    """The tasks under ``directory`` (folders with a ``task.json``, at any depth), split by a
    hash of their ids."""

    def __init__(self, directory: str | Path, eval_fraction: float = 0.1) -> None:
        dirs = sorted(p.parent for p in Path(directory).rglob("task.json"))
        if not dirs:
            raise ValueError(f"no code task (a folder with task.json) under {directory}")
        self.tasks = {t.reference: t for t in map(RepoTask.load, dirs)}
        self._patched: dict[str, dict[str, str] | str] = {}  # id -> its files, patched
        self.splits = self.split_by_id(self.tasks, eval_fraction)

    def make_env(self, reference: str) -> RepoEnv:
        return RepoEnv(self.tasks[reference])

    def sft_conversation(self, task: RepoTask, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """Read each changed file that exists, write each as the patch leaves it, say Done;
        with probability ``error_rate`` the patch's first added line is left out."""
        if task.reference not in self._patched:
            self._patched[task.reference] = apply_patch(task.workspace, task.patch)
        after, changed = self._patched[task.reference], task.meta["files"]
        if isinstance(after, str):
            raise ValueError(f"task {task.reference}: {after}")
        new = {p: after[p] for p in changed}
        if rng.random() < error_rate:
            added = next(line[1:] for line in task.patch.splitlines()
                         if line.startswith("+") and not line.startswith("+++"))
            first = changed[0]
            new[first] = new[first].replace(added + "\n", "", 1)
        existing = [p for p in changed if p in task.workspace]
        turns = tool_turns([("read_file", {"path": p}) for p in existing],
                           [task.workspace[p] for p in existing]) if existing else []
        turns += tool_turns([("write_file", {"path": p, "content": new[p]}) for p in changed],
                            [f"wrote {p}" for p in changed])
        return task.messages() + turns + [{"role": "assistant", "content": "Done."}]


@member("task", "repo_tasks")
class RepoTasksConfig(TaskFamily):
    """``repo_tasks``: the code tasks under ``dir`` (``posttrain synthesize repo``), each worked
    in a sandbox with ``read_file``, ``write_file`` and ``run_tests`` and scored by its hidden
    fail-to-pass and pass-to-pass tests (reward parts ``correct``, ``f2p``, ``p2p``, verifier
    ``env``)."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = PARTS
    dir: str = Field(description="the code tasks written by posttrain synthesize repo")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = RepoTasks(self.dir, self.eval_fraction)
        first = next(iter(tasks.tasks.values()))
        return TaskParts(tasks, RepoEnv(first).tools, tasks.make_env)
