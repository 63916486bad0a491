"""Code tasks from a local git repository's history (DeepSeek V4.1's and MiMo's pipelines,
docs/synthesis.md): each commit ``C`` with one parent ``B`` is a candidate task, "make B do
what C does", its statement C's message and its reference solution C's change to the code.

- **Tests**: C's test files are run on C and on B (the tests added to B's tree); a test
  passing on C and failing on B is fail-to-pass (F2P), one passing on both pass-to-pass
  (P2P); a test failing on C is left out. No F2P test: dropped.
- **Stability**: the tests run ``runs`` times on C (MiMo runs a reference patch 8 times); a
  test whose result differs between runs is flaky and left out of F2P and P2P. A commit whose
  only candidate F2P tests are flaky: dropped as unstable.
- **The patch**: applied to the packaged workspace, it gives C's test results.
- **Packaging**: the workspace is B's tree, its own tests included (``git archive``: no
  history at all, so none after B, and no caches or bytecode); C's test files (hidden, they
  replace B's when the task is scored) and the patch stay outside it. The audit:
  the workspace holds no ``.git``, cache or bytecode, and no line the patch adds (a leaked
  solution); else dropped.

Tests are plain functions ``test_*`` in ``tests/test_*.py``, run by a small runner in the
sandbox (no test framework needed); a test passes when it returns without raising."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

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


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def tree(repo: Path, commit: str) -> dict[str, str]:
    """The files of ``commit`` (path -> text), from ``git archive``."""
    raw = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {m.name: tar.extractfile(m).read().decode("utf-8", "replace")
                for m in tar.getmembers() if m.isfile()}


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
    import tempfile

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


def leaks(workspace: dict[str, str], patch: str) -> list[str]:
    """What the packaged workspace must not hold: history, caches, bytecode, and any line
    (of at least 12 characters, stripped) that the patch adds."""
    found = [p for p in workspace if p.startswith(".git") or "__pycache__" in p
             or p.endswith(".pyc")]
    added = {line[1:].strip() for line in patch.splitlines()
             if line.startswith("+") and not line.startswith("+++")}
    text = {line.strip() for body in workspace.values() for line in body.splitlines()}
    return found + sorted(f"the solution's line {a!r}" for a in added
                          if len(a) >= 12 and a in text)


def task_from_commit(repo: Path, commit: str, runs: int = 3) -> tuple[dict | None, str]:
    """``(the task, "")`` for ``commit``, or ``(None, why it was dropped)``."""
    parents = git(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    if len(parents) != 1:
        return None, "a root or merge commit (not one parent)"
    base = parents[0]
    after, before = tree(repo, commit), tree(repo, base)
    tests = {p: t for p, t in after.items() if is_test(p)}
    code = [p for p in git(repo, "diff", "--name-only", base, commit).split()
            if p.endswith(".py") and not is_test(p)]
    if not code:
        return None, "the commit changes no code"
    results = [run_tests(after) for _ in range(runs)]
    if failed := next((r for r in results if isinstance(r, str)), None):
        return None, f"the tests do not run on the commit: {failed}"
    stable = {t: v for t, v in results[0].items() if all(r.get(t) == v for r in results)}
    workspace = before
    on_base = run_tests({**workspace, **tests})
    if isinstance(on_base, str):
        return None, f"the tests do not run on the base: {on_base}"
    passing = [t for t, v in stable.items() if v == "pass"]
    f2p = [t for t in passing if on_base.get(t) != "pass"]
    p2p = [t for t in passing if on_base.get(t) == "pass"]
    if not f2p:
        new = [t for t in results[0] if t not in stable and on_base.get(t) != "pass"]
        return None, (f"unstable: its fail-to-pass tests' results differ over {runs} runs"
                      if new else "no fail-to-pass test")
    patch = git(repo, "diff", base, commit, "--", *code)
    patched = apply_patch(workspace, patch)
    rerun = {} if isinstance(patched, str) else run_tests({**patched, **tests})
    if isinstance(rerun, str) or any(rerun.get(t) != "pass" for t in f2p + p2p):
        return None, "the packaged patch does not reproduce the commit's test results"
    found = leaks(before, patch)
    if found:
        return None, f"leaky: the workspace holds {', '.join(found)}"
    message = git(repo, "log", "-1", "--format=%B", commit).strip()
    return {"id": f"repo-{commit[:10]}", "statement": message, "base": base, "commit": commit,
            "f2p": f2p, "p2p": p2p, "flaky": sorted(set(results[0]) - set(stable)),
            "workspace": workspace, "tests": tests, "patch": patch, "files": code}, ""


def save_task(task: dict, directory: Path) -> None:
    """``task.json`` (statement, base, F2P and P2P ids, changed files), ``workspace/`` (what
    the model sees), ``tests/`` (hidden) and ``patch.diff`` (the reference solution); written
    whole into a new directory."""
    tmp = directory.with_name(directory.name + ".tmp")
    for sub, files in (("workspace", task["workspace"]), ("hidden", task["tests"])):
        for path, text in files.items():
            target = tmp / sub / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    (tmp / "patch.diff").write_text(task["patch"], encoding="utf-8")
    meta = {k: task[k] for k in ("id", "statement", "base", "commit", "f2p", "p2p", "flaky",
                                 "files")}
    (tmp / "task.json").write_text(json.dumps(meta, indent=1) + "\n")
    tmp.rename(directory)


def synthesize_repo_tasks(repo: str | Path, out_dir: str | Path, runs: int = 3,
                          progress=None) -> dict:
    """A task from every commit of ``repo``'s current branch that passes the checks (module
    docstring), written to ``out_dir/<id>/``; the report (returned) to ``out_dir/report.json``."""
    repo, out = Path(repo), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    rows = []
    for i, commit in enumerate(commits):
        task, why = task_from_commit(repo, commit, runs)
        if task is None:
            rows.append({"commit": commit, "kept": None, "dropped": why})
        else:
            save_task(task, out / task["id"])
            rows.append({"commit": commit, "kept": task["id"], "f2p": len(task["f2p"]),
                         "p2p": len(task["p2p"])})
        if progress is not None:
            progress(i + 1)
    dropped: dict[str, int] = {}
    for r in rows:
        if r["kept"] is None:
            kind = r["dropped"].split(":")[0]
            dropped[kind] = dropped.get(kind, 0) + 1
    report = {"commits": len(commits), "kept": sum(r["kept"] is not None for r in rows),
              "dropped": dropped, "tasks": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
