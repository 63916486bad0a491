"""The leakage audit (SkillsBench): a skill must teach a procedure, not carry a task's answer.
It may not name a task's files or paths, nor hold its expected values or magic constants;
``audit`` lists where it does, in the skill's text and in its scripts and references."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from posttrain.features.skills.skill import Skill

ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.-]+/)+[\w.-]+")


@dataclass(frozen=True)
class LeakageFinding:
    skill: str
    where: str  # SKILL.md or the file's relative path
    kind: str  # "task file", "expected value", "absolute path"
    text: str

    def __str__(self) -> str:
        return f"{self.skill}/{self.where}: {self.kind} {self.text!r}"


def audit(skill: Skill, directory: str | Path | None = None, task_files: Iterable[str] = (),
          expected: Iterable[str] = ()) -> list[LeakageFinding]:
    """Where ``skill`` names one of ``task_files`` (by base name), contains one of the
    ``expected`` values (as a whole word or number) or an absolute path; its files are read
    from ``directory`` when given."""
    texts = {"SKILL.md": skill.text()}
    if directory is not None:
        for name in skill.files:
            texts[name] = (Path(directory) / name).read_text(encoding="utf-8", errors="replace")
    names = {Path(f).name for f in task_files if Path(f).name}
    values = [v for v in (str(e).strip() for e in expected) if v]
    found = []
    for where, text in texts.items():
        found += [LeakageFinding(skill.name, where, "task file", n) for n in sorted(names)
                  if n in text]
        found += [LeakageFinding(skill.name, where, "expected value", v) for v in values
                  if re.search(rf"(?<![\w.]){re.escape(v)}(?![\w]|\.\d)", text)]
        found += [LeakageFinding(skill.name, where, "absolute path", m)
                  for m in sorted(set(ABSOLUTE_PATH.findall(text)))]
    return found
