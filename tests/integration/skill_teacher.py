"""A scripted SkillRL teacher (the ``skills.teacher.function`` of the skills tests): a
success becomes the skill ``worked-<n>`` (n: the trajectory's length mod 3, so later ones
merge into earlier ones), a failure the lesson ``lesson-<n>``, except that a failure whose
trajectory has an even length gets a lesson quoting the expected answer (a leak the bank
discards) and one of length divisible by 7 gets text that is no SKILL.md (rejected)."""

from posttrain.features.skills import Skill


def teach(trajectory: str, reference: str, success: bool):
    n = len(trajectory)
    if success:
        return Skill(f"worked-{n % 3}", "What worked on a task like this.",
                     f"Worked in {n} characters: show each column.", ("addition",))
    if n % 7 == 0:
        return "no front matter here"
    if n % 2 == 0:
        return Skill(f"lesson-{n % 3}", "A lesson.", f"The answer was {reference}.")
    return f"""---
name: lesson-{n % 3}
description: Where an attempt went wrong.
triggers: [addition]
version: 0.1.0
---
Failure point: the last column. Wrong action: dropped the carry. Correct action: carry the
ten. General rule: check every column's carry ({n} characters)."""
