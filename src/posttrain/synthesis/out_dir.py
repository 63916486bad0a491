"""A synthesis's output directory resumes like a training run's (docs/synthesis.md,
"Interrupted, resumed, replaced").

- ``claim``: a fresh synthesis needs a new directory, or one holding no synthesis's work;
  ``overwrite`` first removes what a synthesis writes (and nothing else); ``resume`` needs the
  settings of the synthesis there (``synthesis.json``), unchanged but for a larger count, and
  cuts the directory back to its journal.
- The journal (``progress.jsonl``) holds one row an item (an environment, a commit, a task),
  appended as each finishes; ``resumable`` builds only the items it lacks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

SETTINGS = "synthesis.json"  # the command and its settings
JOURNAL = "progress.jsonl"  # a row a finished item: {key: item, "kept": folder or None, ...}
REPORTS = ("report.json", "filter_report.json")
MARKS = ("env.json", "task.json")  # a folder holding one is an environment or a task written
GROW = ("count",)  # settings that --resume may raise


class OutDirError(ValueError):
    """The output directory cannot be used as asked; the message says what to do instead."""


def claim(out: Path, command: str, settings: dict, resume: bool, overwrite: bool) -> None:
    """Make ``out`` ready for a fresh, resumed or overwritten synthesis by ``command`` with
    ``settings`` (JSON values), or raise ``OutDirError``."""
    if resume and overwrite:
        raise OutDirError("--resume continues the synthesis in OUT and --overwrite replaces "
                          "it: choose one")
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{out} is a file: give a directory")
    work = synthesis_work(out)
    if overwrite or not work:
        _remove(out)
    elif resume:
        _check_same(out, command, settings)
        _remove(out, keep={r["kept"] for r in finished(out)})  # what an interrupted item left
    else:
        shown = ", ".join(work[:4]) + (", ..." if len(work) > 4 else "")
        raise OutDirError(f"{out} is not empty ({shown}): --resume continues the synthesis "
                          "there, --overwrite replaces it, or give a new path")
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS).write_text(json.dumps({"command": command, "settings": settings},
                                           indent=1) + "\n")


def synthesis_work(out: Path) -> list[str]:
    """The names in ``out`` but its settings and empty files: none where nothing was built
    (a new directory, or one a start that failed left)."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if p.name != SETTINGS
                  and (p.is_dir() or p.lstat().st_size))


def _check_same(out: Path, command: str, settings: dict) -> None:
    """Raise unless ``out``'s saved synthesis is ``command`` with ``settings`` (a ``GROW``
    setting may be larger)."""
    if not (out / SETTINGS).is_file():
        raise OutDirError(f"nothing to resume in {out}: it holds no {SETTINGS} (a synthesis "
                          "by an older posttrain, or other files); --overwrite starts over")
    saved = json.loads((out / SETTINGS).read_text())
    if saved["command"] != command:
        raise OutDirError(f"{out} holds what `synthesize {saved['command']}` built, not "
                          f"`synthesize {command}`: --overwrite replaces it")
    old = saved["settings"]
    changed = [k for k in sorted(set(old) | set(settings)) if old.get(k) != settings.get(k)
               and not (k in GROW and settings.get(k, 0) > old.get(k, 0))]
    if changed:
        raise OutDirError(f"--resume with other settings than the synthesis in {out}: "
                          f"{', '.join(changed)} differ from its {SETTINGS}")


def _remove(out: Path, keep: set[str] | None = None) -> None:
    """Remove what a synthesis writes in ``out``: its settings, journal, reports, half-written
    ``*.tmp`` folders and environment or task folders (a file or folder of another's stays);
    with ``keep`` (a resumed synthesis's), only the folders the journal does not name."""
    if not out.is_dir():
        return
    for p in out.iterdir():
        if p.is_dir() and not p.is_symlink():
            if p.name.endswith(".tmp") or (any((p / m).is_file() for m in MARKS)
                                           and (keep is None or p.name not in keep)):
                shutil.rmtree(p)
        elif keep is None and p.name in (SETTINGS, JOURNAL, *REPORTS):
            p.unlink()


def finished(out: Path) -> list[dict]:
    """The journal's rows; a torn last line (a process killed while writing it) is cut off."""
    path = out / JOURNAL
    if not path.is_file():
        return []
    data = path.read_bytes()
    whole = data[:data.rfind(b"\n") + 1]
    if len(whole) < len(data):
        path.write_bytes(whole)
    return [json.loads(line) for line in whole.decode().splitlines()]


def resumable(out: Path, key: str, items: Sequence[Hashable],
              make: Callable[[Sequence[Hashable]], list[dict]], chunk: int = 1,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """A row an item of ``items``, in their order: the journal's (``row[key]`` is the item),
    and for the others ``make(batch)``'s rows, ``chunk`` items a batch, each batch appended
    to the journal as soon as it is made; ``progress(done)`` after each batch."""
    wanted = set(items)
    rows = {r[key]: r for r in finished(out) if r[key] in wanted}
    todo = [x for x in items if x not in rows]
    with open(out / JOURNAL, "a", encoding="utf-8") as journal:
        for start in range(0, len(todo), chunk):
            made = make(todo[start:start + chunk])
            journal.write("".join(json.dumps(r) + "\n" for r in made))
            journal.flush()
            rows.update((r[key], r) for r in made)
            if progress is not None:
                progress(len(rows))
    return [rows[x] for x in items]
