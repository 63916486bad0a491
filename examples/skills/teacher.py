"""A scripted SkillRL teacher for the skills example (a strong model's endpoint plays this part
in a real run: ``skills.teacher.endpoint``). It reads an addition episode's question and
answer: a failed one that dropped a carry becomes the lesson ``lesson-dropped-carry``, any
other failure ``lesson-check-columns``; a success becomes ``addition-worked`` (later ones
merge into it, bumping its version). It never writes the answer: the bank's leakage audit
would discard the skill."""

import re

from posttrain.envs.arithmetic import Problem
from posttrain.features.skills import Skill

QUESTION = re.compile(r"What is (\d+)\+(\d+)\?")
ANSWER = re.compile(r"<answer>(-?\d+)</answer>")


def teach(trajectory: str, reference: str, success: bool) -> Skill | None:
    asked, answered = QUESTION.findall(trajectory), ANSWER.findall(trajectory)
    if not asked:
        return None
    a, b = map(int, asked[-1])
    if success:
        return Skill("addition-worked", "How a correct addition was worked.",
                     "Work from the ones column; carry every ten; write the answer in "
                     "<answer></answer> tags.", ("addition", "+"))
    if answered and int(answered[-1]) == Problem(a, "+", b).flawed_answer != a + b:
        return Skill("lesson-dropped-carry", "A lesson: a column's carry was dropped.",
                     "Failure point: a column that summed to ten or more.\n"
                     "Wrong action: wrote the column's last digit and dropped the 1.\n"
                     "Correct action: carry the 1 into the next column.\n"
                     "General rule: every column adds the carry of the one before.", ("+",))
    return Skill("lesson-check-columns", "A lesson: check every column before answering.",
                 "Failure point: the final answer.\nWrong action: answered without checking.\n"
                 "Correct action: recompute each column.\nGeneral rule: check, then answer.",
                 ("+",))
