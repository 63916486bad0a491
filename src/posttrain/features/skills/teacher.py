"""SkillRL's teacher: a successful trajectory is distilled into a skill (the procedure that
worked), a failed one into a lesson (where it failed, the wrong action, the correct action,
the general rule). A teacher is ``teach(trajectory, reference, success) -> Skill | str |
None`` (a ``Skill``, a ``SKILL.md`` text, or nothing to add): a function (a scripted teacher,
named by dotted path) or ``ChatTeacher``, a chat model (an endpoint) asked to write the
``SKILL.md``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from posttrain.config.sections.skills import LESSON_PROMPT, SKILL_PROMPT
from posttrain.features.skills.skill import Skill, parse_skill


class SkillTeacher(Protocol):
    def __call__(self, trajectory: str, reference: str, success: bool) -> Skill | str | None:
        ...


class ChatTeacher:
    """A chat model as the teacher: ``chat`` (conversations -> replies) is asked
    ``skill_prompt`` for a success and ``lesson_prompt`` for a failure (``{trajectory}``
    filled in); the reply is the ``SKILL.md``. The reference is not shown."""

    def __init__(self, chat: Callable[[Sequence[list[dict]]], list[str]],
                 skill_prompt: str = SKILL_PROMPT, lesson_prompt: str = LESSON_PROMPT) -> None:
        self.chat, self.prompts = chat, {True: skill_prompt, False: lesson_prompt}

    def __call__(self, trajectory: str, reference: str, success: bool) -> str:
        prompt = self.prompts[success].format(trajectory=trajectory)
        return self.chat([[{"role": "user", "content": prompt}]])[0]


def as_skill(taught: Skill | str | None) -> Skill | None:
    """A teacher's answer as a skill: a ``SKILL.md`` text is parsed (a fenced one too);
    ``SkillError`` when it does not parse."""
    if taught is None or isinstance(taught, Skill):
        return taught
    text = taught.strip()
    if text.startswith("```"):  # a reply fenced as a code block
        text = text.split("\n", 1)[-1].rsplit("```", 1)[0].strip()
    return parse_skill(text + "\n", "the teacher's SKILL.md")
