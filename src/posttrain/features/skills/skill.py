"""One skill: a directory with ``SKILL.md`` (YAML front matter between ``---`` lines, then the
procedure in Markdown) and optional ``scripts/`` and ``references/`` files.

Front matter: ``name`` (lower-case words joined by ``-``, the directory's name), ``description``
(one line: what it is for — what retrieval and the system prompt see), ``triggers`` (phrases
that call it up), ``version`` (``MAJOR.MINOR.PATCH``), ``general`` (always in context; default
false). A malformed skill is a ``SkillError`` naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from posttrain.types import DataError, write_atomic

NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
PARTS = ("major", "minor", "patch")


class SkillError(DataError):
    """A skill that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    triggers: tuple[str, ...] = ()
    version: str = "0.1.0"
    general: bool = False
    files: tuple[str, ...] = field(default=())  # scripts/ and references/, relative paths

    def metadata(self) -> str:
        """What an agent sees before the skill is triggered: one line."""
        return f"{self.name} (v{self.version}): {self.description}"

    def text(self) -> str:
        """Everything retrieval and the leakage audit read."""
        return "\n".join([self.name, self.description, *self.triggers, self.body])


def bump(version: str, part: str = "patch") -> str:
    """``version`` with ``part`` (major, minor or patch) raised and the parts after it 0."""
    match = VERSION.match(version)
    if match is None or part not in PARTS:
        raise SkillError(f"cannot bump {part!r} of version {version!r}")
    i, numbers = PARTS.index(part), [int(n) for n in match.groups()]
    return ".".join(map(str, numbers[:i] + [numbers[i] + 1] + [0] * (2 - i)))


def load_skill(directory: str | Path) -> Skill:
    """The skill in ``directory`` (its ``SKILL.md`` and files)."""
    directory = Path(directory)
    path = directory / "SKILL.md"
    if not path.is_file():
        raise SkillError(f"{directory}: no SKILL.md")
    skill = parse_skill(path.read_text(encoding="utf-8"), str(path))
    if skill.name != directory.name:
        raise SkillError(f"{path}: name {skill.name!r} must equal the directory's name "
                         f"{directory.name!r}")
    files = tuple(sorted(str(f.relative_to(directory)) for sub in ("scripts", "references")
                         for f in (directory / sub).rglob("*") if f.is_file()))
    return replace(skill, files=files)


def load_skills(directory: Path) -> dict[str, Skill]:
    """Every skill of the bank ``directory`` (its sub-directories but hidden ones) by name; a
    ``SkillError`` lists every one that does not load."""
    errors, skills = [], {}
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            skills[sub.name] = load_skill(sub)
        except SkillError as exc:
            errors.append(str(exc))
    if errors:
        raise SkillError(f"{len(errors)} skills in {directory} cannot be used:\n"
                         + "\n".join(errors))
    return skills


def parse_skill(text: str, where: str = "SKILL.md") -> Skill:
    """The skill a ``SKILL.md`` text describes (no files); ``where`` names it in errors."""
    parts = text.split("---\n", 2) if text.startswith("---\n") else []
    if len(parts) != 3:
        raise SkillError(f"{where}: no front matter (a '---' line, YAML, a '---' line)")
    try:
        meta = yaml.safe_load(parts[1]) or {}
    except yaml.YAMLError as exc:
        raise SkillError(f"{where}: front matter is not YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise SkillError(f"{where}: front matter must be a mapping")

    def field_(key: str, kind: type, default=None):
        value = meta.get(key, default)
        if not isinstance(value, kind):
            raise SkillError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
        return value

    name, description = field_("name", str), field_("description", str).strip()
    if not NAME.match(name):
        raise SkillError(f"{where}: name {name!r} must be lower-case words joined by '-'")
    if not description or "\n" in description:
        raise SkillError(f"{where}: description must be one non-empty line")
    triggers = field_("triggers", list, [])
    if not all(isinstance(t, str) and t.strip() for t in triggers):
        raise SkillError(f"{where}: triggers must be non-empty strings")
    version = str(meta.get("version", "0.1.0"))
    if not VERSION.match(version):
        raise SkillError(f"{where}: version {version!r} is not MAJOR.MINOR.PATCH")
    if unknown := set(meta) - {"name", "description", "triggers", "version", "general"}:
        raise SkillError(f"{where}: unknown front matter keys {sorted(unknown)}")
    return Skill(name, description, parts[2].strip(), tuple(triggers), version,
                 bool(field_("general", bool, False)))


def skill_text(skill: Skill) -> str:
    """``skill`` as ``SKILL.md`` text (``parse_skill`` reads it back)."""
    meta = {"name": skill.name, "description": skill.description,
            "triggers": list(skill.triggers), "version": skill.version, "general": skill.general}
    return f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n{skill.body}\n"


def write_skill(skill: Skill, bank: str | Path) -> Path:
    """``skill``'s ``SKILL.md`` into ``bank/<name>/``, atomically (its files stay)."""
    directory = Path(bank) / skill.name
    write_atomic(directory / "SKILL.md", skill_text(skill))
    return directory
