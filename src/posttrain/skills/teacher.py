"""SkillRL's teacher: a successful trajectory is distilled into a skill (the procedure that
worked), a failed one into a lesson (where it failed, the wrong action, the correct action,
the general rule). A teacher is ``teach(trajectory, reference, success) -> Skill | str |
None`` (a ``Skill``, a ``SKILL.md`` text, or nothing to add): a function (a scripted teacher,
named by dotted path) or ``ChatTeacher``, a chat model (an endpoint) asked to write the
``SKILL.md``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from posttrain.skills.skill import Skill, parse_skill

SKILL_PROMPT = """An agent solved the task below. Distil what made it work into a reusable skill
for tasks like it: a short general procedure, not this task's answer (never write the
expected result, file names or paths of the task).

Reply with a SKILL.md only: a front matter between '---' lines with name (lower-case words
joined by '-'), description (one line), triggers (a list of phrases that call it up) and
version 0.1.0, then the procedure in Markdown.

Trajectory:
{trajectory}"""

LESSON_PROMPT = """An agent failed the task below. Write a lesson for tasks like it with four
parts: the failure point, the wrong action, the correct action and the general rule. Do not
write the expected result, file names or paths of the task.

Reply with a SKILL.md only: a front matter between '---' lines with name (lower-case words
joined by '-', starting with 'lesson-'), description (one line), triggers (a list of phrases
that call it up) and version 0.1.0, then the lesson in Markdown.

Trajectory:
{trajectory}"""


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
