"""Building tool environments (DeepSeek V3.2's loop, docs/synthesis.md): a builder writes an
environment; the validation runs its reference solution (tools only) and its verifier in the
sandbox; a draft that fails goes back to the builder with the reason, until it validates or
``max_rounds`` drafts were written; a valid one is asked for again one level harder, and the
hardest valid draft is kept. Kept environments are saved with the reference solution's trace;
a task already kept (same question over the same database) is dropped as a duplicate.

Validation: the files parse; the reference solution only calls tools, runs, calls at least
one, and answers the same when run again; the verifier accepts its answer every one of
``repeats`` times (else it is flaky); the audit's exploit answers each fail (else the
environment is leaky): the empty answer, a refusal, and a spray of every value in the
database (what a lenient verifier, such as a substring match, lets through)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.envs.tool_env import ToolEnvError, ToolEnvFiles, ToolEnvRunner
from posttrain.synthesis.out_dir import finished, resumable
from posttrain.synthesis.scripted import BuildRequest

Builder = Callable[[BuildRequest], dict[str, str]]


@dataclass
class Validation:
    """A draft's verdict: ``reason`` says why it is not valid ("" when it is)."""

    reason: str = ""
    answer: str = ""
    calls: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reason


def exploit_answers(env: ToolEnvFiles) -> dict[str, str]:
    """Answers that solve nothing, by name: each must fail the verifier."""
    values: list[str] = []

    def collect(x) -> None:
        if isinstance(x, dict | list):
            for v in x.values() if isinstance(x, dict) else x:
                collect(v)
        elif x is not None:
            values.append(str(x))

    collect(json.loads(env.files["db.json"]))
    return {"the empty answer": "", "a refusal": "unknown",
            "an answer spray": " ".join(dict.fromkeys(values))}


def validate(files: dict[str, str], repeats: int = 5) -> tuple[ToolEnvFiles | None, Validation]:
    """The draft's environment (None when malformed) and its ``Validation``."""
    try:
        env = ToolEnvFiles(files)
    except ToolEnvError as e:
        return None, Validation(f"malformed: {e}")
    runner = ToolEnvRunner(env)
    solved = runner.solve()
    if isinstance(solved, str):
        return env, Validation(f"the reference solution failed: {solved}")
    answer, calls = solved
    if not calls:
        return env, Validation("the reference solution calls no tool")
    again = runner.solve()
    if again != solved:
        return env, Validation("the reference solution is unstable: a second run answered "
                               "otherwise")
    exploits = exploit_answers(env)
    verdicts = runner.verify_all([answer] * repeats + list(exploits.values()))
    if isinstance(verdicts, str):
        return env, Validation(f"the verifier failed: {verdicts}")
    mine, theirs = verdicts[:repeats], verdicts[repeats:]
    if len(set(mine)) > 1:
        return env, Validation(f"the verifier is flaky: it accepted the reference solution's "
                               f"answer {sum(mine)} times of {repeats}")
    if not mine[0]:
        return env, Validation("the verifier rejects the reference solution's answer")
    leaks = [name for name, accepted in zip(exploits, theirs) if accepted]
    if leaks:
        return env, Validation(f"leaky: the verifier accepts {', '.join(leaks)}")
    return env, Validation(answer=answer, calls=calls)


@dataclass
class Outcome:
    """What the loop made of environment ``index``: the kept environment (None: none) at
    ``level``, the builder's drafts (``rounds``) and each failed draft's reason."""

    index: int
    kept: ToolEnvFiles | None = None
    level: int = 0
    rounds: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> str | None:
        """Why nothing was kept (the last failure), or None."""
        return None if self.kept is not None else (self.failures or ["no draft"])[-1]


def build_one(builder: Builder, index: int, max_level: int = 4, max_rounds: int = 6
              ) -> Outcome:
    """Environment ``index`` through the loop (module docstring)."""
    out, level, previous, feedback = Outcome(index), 1, None, None
    while out.rounds < max_rounds:
        out.rounds += 1
        try:
            files = builder(BuildRequest(index, level, previous, feedback))
        except Exception as e:  # a builder's bug or a model's unparseable reply: a failure
            files, env, check = None, None, Validation(f"the builder failed: {e}")
        else:
            env, check = validate(files)
        if not check.ok:
            out.failures.append(check.reason)
            previous, feedback = files, check.reason
            continue
        spec = {**env.spec, "meta": {**env.spec.get("meta", {}), "level": level,
                                     "trace": {"answer": check.answer, "calls": check.calls}}}
        out.kept, out.level = ToolEnvFiles({**env.files, "env.json": json.dumps(spec)}), level
        if level == max_level:
            break
        level, previous, feedback = level + 1, files, None
    return out


def _row(o: Outcome, seen: dict[str, str], out: Path) -> dict:
    """``o``'s report row; a kept environment is saved in ``out`` and noted in ``seen`` (task
    key -> id), or dropped as a duplicate of one there."""
    row = {"index": o.index, "rounds": o.rounds, "failures": o.failures}
    if o.kept is not None and task_key(o.kept) in seen:
        row["duplicate_of"] = seen[task_key(o.kept)]
        o.kept = None
        o.failures.append("duplicate: a kept task asks the same over the same database")
    if o.kept is None:
        return row | {"kept": None, "dropped": o.dropped}
    seen[task_key(o.kept)] = o.kept.id
    o.kept.save(out / o.kept.id)
    return row | {"kept": o.kept.id, "level": o.level}


def task_key(env: ToolEnvFiles) -> str:
    """Equal for the same question over the same database."""
    return hashlib.sha256((env.spec["task"] + env.files["db.json"]).encode()).hexdigest()


def reason_kind(reason: str) -> str:
    """A failure reason without its particulars (what the report counts): its first two
    clauses, numbers as N."""
    return re.sub(r"\d+", "N", ": ".join(reason.split(": ")[:2]))


def synthesize_tool_envs(builder: Builder, count: int, out_dir: str | Path,
                         max_level: int = 4, max_rounds: int = 6,
                         progress: Callable[[int], None] | None = None) -> dict:
    """``count`` environments (indices ``0 .. count-1``) through the loop; the kept ones are
    written to ``out_dir/<id>/``, each one's row to the journal as it is done (the rows there
    already, an interrupted synthesis's, are not built again: ``synthesis.out_dir``), and the
    report (returned) to ``out_dir/report.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seen = {task_key(ToolEnvFiles.load(out / r["kept"])): r["kept"]
            for r in finished(out) if r["kept"] is not None}
    rows = resumable(out, "index", range(count), lambda batch: [
        _row(build_one(builder, i, max_level, max_rounds), seen, out) for i in batch],
        progress=progress)
    dropped = Counter(reason_kind(r["dropped"]) for r in rows if r["kept"] is None)
    report = {
        "attempts": count, "kept": sum(r["kept"] is not None for r in rows),
        "dropped": dict(dropped), "drafts": sum(r["rounds"] for r in rows),
        "failed_drafts": dict(Counter(reason_kind(f) for r in rows for f in r["failures"])),
        "levels": dict(Counter(str(r["level"]) for r in rows if r["kept"] is not None)),
        "environments": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report
