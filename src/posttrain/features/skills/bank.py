"""``SkillBank``: a directory of skill directories, validated when read, retrievable, and
maintained (AutoSkill's add / merge / discard):

- ``add`` a new skill (its name must be free; it must pass the leakage audit);
- ``merge`` into an existing one: description and body replaced where given, triggers
  united, the patch version bumped;
- ``discard``: the skill's directory moves to ``.discarded/<name>-<version>`` (nothing is
  deleted);
- ``maintain`` decides for a candidate: a leaking one is discarded, one whose name is taken or
  whose embedding's cosine with its nearest skill's reaches ``merge_at`` is merged into it,
  else added. (A cosine, not the normalised ``Rel`` of retrieval: min-max over a handful of
  skills says which is nearest, not how near.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from posttrain.features.skills.audit import LeakageFinding, audit
from posttrain.features.skills.retrieval import Embed, SkillIndex, hashed_embedding
from posttrain.features.skills.skill import (
    Skill,
    SkillError,
    bump,
    load_skill,
    load_skills,
    write_skill,
)

DISCARDED = ".discarded"


class SkillBank:
    def __init__(self, directory: str | Path) -> None:
        """The bank at ``directory`` (created if missing); every skill in it must load."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._skills = load_skills(self.directory)

    @property
    def skills(self) -> list[Skill]:
        return list(self._skills.values())

    def __getitem__(self, name: str) -> Skill:
        if name not in self._skills:
            raise KeyError(f"no skill {name!r} in {self.directory}")
        return self._skills[name]

    def index(self, **options) -> SkillIndex:
        """Retrieval over the bank's skills (``SkillIndex``'s options)."""
        return SkillIndex(self.skills, **options)

    def audit(self, task_files: Iterable[str] = (), expected: Iterable[str] = ()
              ) -> list[LeakageFinding]:
        """The leakage audit of every skill, its files included."""
        task_files, expected = list(task_files), list(expected)
        return [f for s in self.skills
                for f in audit(s, self.directory / s.name, task_files, expected)]

    def add(self, skill: Skill, task_files: Iterable[str] = (),
            expected: Iterable[str] = ()) -> Skill:
        if skill.name in self._skills:
            raise SkillError(f"skill {skill.name!r} exists in {self.directory}: merge into it")
        if leaks := audit(skill, None, task_files, expected):
            raise SkillError("the skill leaks task data: " + "; ".join(map(str, leaks)))
        return self._store(skill)

    def merge(self, name: str, update: Skill) -> Skill:
        old = self[name]
        return self._store(replace(
            old, description=update.description or old.description, body=update.body or old.body,
            triggers=tuple(dict.fromkeys(old.triggers + update.triggers)),
            version=bump(old.version)))

    def _store(self, skill: Skill) -> Skill:
        """Write ``skill`` and keep it as read back (its files included)."""
        self._skills[skill.name] = load_skill(write_skill(skill, self.directory))
        return self._skills[skill.name]

    def discard(self, name: str) -> Path:
        skill = self[name]
        target = self.directory / DISCARDED / f"{name}-{skill.version}"
        target.parent.mkdir(exist_ok=True)
        if target.exists():
            shutil.rmtree(target)  # the same version discarded before: its copy is this one
        shutil.move(str(self.directory / name), target)
        del self._skills[name]
        return target

    def maintain(self, candidate: Skill, merge_at: float = 0.8, embed: Embed = hashed_embedding,
                 task_files: Iterable[str] = (), expected: Iterable[str] = ()
                 ) -> tuple[str, Skill | None]:
        """``("discard" | "merge" | "add", the skill kept or None)`` for ``candidate``; its
        nearest skill is the one whose embedding has the highest cosine with it."""
        if audit(candidate, None, task_files, expected):
            return "discard", None
        nearest = candidate.name if candidate.name in self._skills else None
        others = [s for s in self.skills if not s.general]
        if nearest is None and others:
            vectors = embed([s.text() for s in others] + [candidate.text()])
            cosines = vectors[:-1] @ vectors[-1]
            best = int(cosines.argmax())
            nearest = others[best].name if cosines[best] >= merge_at else None
        if nearest is not None:
            return "merge", self.merge(nearest, candidate)
        return "add", self.add(candidate)
