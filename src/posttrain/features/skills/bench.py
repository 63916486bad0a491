"""The SkillsBench protocol: the same tasks played in three conditions, ``vanilla`` (no
skills), ``skills`` (the bank, disclosed as in training) and ``self_generated`` (before each
task the model writes a skill for it, which the episode then opens with), each task's pass
rate the mean of its samples' 0/1 outcomes. It reports each condition's mean pass rate ``P``,
its standard error over tasks, the absolute ``delta`` against vanilla and the normalised
gain ``g = (P_c - P_vanilla) / (1 - P_vanilla)`` (None when ``P_vanilla = 1``), and how many
tasks the condition made better and worse."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from posttrain.features.skills.disclosure import SkillDisclosure, last_user
from posttrain.features.skills.library import SkilledTask, SkillLibrary
from posttrain.features.skills.retrieval import SkillIndex
from posttrain.features.skills.skill import Skill

CONDITIONS = ("vanilla", "skills", "self_generated")

SELF_PROMPT = """Before you solve the task below, write the skill you would want for it: a
short, general procedure for tasks like it (do not solve it). Reply with the procedure only.

Task:
{task}"""


def normalised_gain(p_skill: float, p_vanilla: float) -> float | None:
    """``(p_skill - p_vanilla) / (1 - p_vanilla)``: the share of the headroom the skills
    closed (None when there is none: ``p_vanilla = 1``)."""
    return None if p_vanilla >= 1 else (p_skill - p_vanilla) / (1 - p_vanilla)


class SelfWrittenSkills:
    """SkillsBench's self-generated condition: ``chat`` (the model under test) is asked
    ``prompt`` with each task's last user message, and its reply, as a general skill, opens
    that task's episode."""

    def __init__(self, chat: Callable[[Sequence[list[dict]]], list[str]],
                 prompt: str = SELF_PROMPT) -> None:
        self.chat, self.prompt = chat, prompt

    def tasks(self, tasks: Sequence[Any]) -> list[SkilledTask]:
        asks = [[{"role": "user", "content": self.prompt.format(task=last_user(t.messages()))}]
                for t in tasks]
        return [SkilledTask(t, SkillDisclosure(SkillIndex([Skill(
            "self-written", "written by the agent for this task", reply.strip() or "(empty)",
            general=True)])).opening) for t, reply in zip(tasks, self.chat(asks))]


def skills_bench(pass_rates: Callable[[Sequence[Any]], Sequence[float]], tasks: Sequence[Any],
                 library: SkillLibrary, self_written: SelfWrittenSkills) -> dict[str, Any]:
    """The protocol on ``tasks`` (plain, without skills): ``pass_rates(tasks)`` plays them
    and returns each one's pass rate. The library's skills are withheld but for the
    ``skills`` condition."""
    with library.withheld():
        rates = {"vanilla": list(pass_rates(tasks)),
                 "self_generated": list(pass_rates(self_written.tasks(tasks)))}
    rates["skills"] = list(pass_rates([library.task(t) for t in tasks]))
    base = rates["vanilla"]
    p0 = sum(base) / len(base)
    report: dict[str, Any] = {"tasks": len(tasks), "conditions": {}}
    for c in CONDITIONS:
        mine = rates[c]
        p = sum(mine) / len(mine)
        row = {"pass": p, "stderr": math.sqrt(sum((r - p) ** 2 for r in mine)
                                              / max(len(mine) - 1, 1) / len(mine))}
        if c != "vanilla":
            row |= {"delta": p - p0, "gain": normalised_gain(p, p0),
                    "tasks_better": sum(r > b for r, b in zip(mine, base)),
                    "tasks_worse": sum(r < b for r, b in zip(mine, base))}
        report["conditions"][c] = row
    return report
