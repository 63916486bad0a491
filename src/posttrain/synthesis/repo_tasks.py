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
  the workspace holds no ``.git``, cache or bytecode, and no run of lines the patch adds, found
  whole (a leaked solution); else dropped.

Tests are plain functions ``test_*`` in ``tests/test_*.py``, run by ``envs.repo_env``'s
runner in the sandbox (no test framework needed); a test passes when it returns."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from posttrain.envs.repo_env import apply_patch, is_test, run_tests
from posttrain.synthesis.out_dir import resumable


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


def added_blocks(patch: str) -> list[list[str]]:
    """The runs of consecutive lines the patch adds, each line stripped."""
    blocks, run = [], []
    for line in patch.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            run.append(line[1:].strip())
        elif run:
            blocks.append(run)
            run = []
    return blocks + ([run] if run else [])


def leaks(workspace: dict[str, str], patch: str) -> list[str]:
    """What the packaged workspace must not hold: history, caches, bytecode, and any run of
    lines the patch adds (at least 12 characters in all, stripped) found whole, in order,
    in one of its files."""
    found = [p for p in workspace if p.startswith(".git") or "__pycache__" in p
             or p.endswith(".pyc")]
    texts = ["\n" + "\n".join(line.strip() for line in body.splitlines()) + "\n"
             for body in workspace.values()]
    for block in added_blocks(patch):
        whole = "\n".join(block)
        if len(whole) >= 12 and any(f"\n{whole}\n" in t for t in texts):
            found.append(f"the solution's lines {whole!r}")
    return found


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


def _row(repo: Path, commit: str, runs: int, out: Path) -> dict:
    """``commit``'s report row; its task, if kept, saved in ``out``."""
    task, why = task_from_commit(repo, commit, runs)
    if task is None:
        return {"commit": commit, "kept": None, "dropped": why}
    save_task(task, out / task["id"])
    return {"commit": commit, "kept": task["id"], "f2p": len(task["f2p"]),
            "p2p": len(task["p2p"])}


def synthesize_repo_tasks(repo: str | Path, out_dir: str | Path, runs: int = 3,
                          progress=None) -> dict:
    """A task from every commit of ``repo``'s current branch that passes the checks (module
    docstring), written to ``out_dir/<id>/``, each commit's row to the journal as it is done
    (the rows there already, an interrupted synthesis's, are not made again:
    ``synthesis.out_dir``); the report (returned) to ``out_dir/report.json``."""
    repo, out = Path(repo), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    rows = resumable(out, "commit", commits,
                     lambda batch: [_row(repo, c, runs, out) for c in batch], progress=progress)
    dropped: dict[str, int] = {}
    for r in rows:
        if r["kept"] is None:
            kind = r["dropped"].split(":")[0]
            dropped[kind] = dropped.get(kind, 0) + 1
    report = {"commits": len(commits), "kept": sum(r["kept"] is not None for r in rows),
              "dropped": dropped, "tasks": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
