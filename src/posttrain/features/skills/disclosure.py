"""Progressive disclosure: what an agent sees of a skill bank, and when (EvoSkill, Claude
Code). At the start of an episode its system prompt holds every general skill in full, every
skill retrieved for the task whose trigger the task names in full, and the other retrieved
skills as one metadata line each; the ``read_skill`` tool returns a skill's full procedure
(and the files it ships) on request. ``opening`` puts that system prompt in front of the
episode's messages (after its own system message, if any)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from posttrain.features.skills.retrieval import SkillIndex
from posttrain.features.skills.skill import Skill
from posttrain.harness import Tool

HEADER = "Skills you can use (call read_skill with a name to read one in full):"


def full(skill: Skill) -> str:
    files = f"\nFiles: {', '.join(skill.files)}" if skill.files else ""
    return f"## Skill: {skill.name} (v{skill.version})\n{skill.body}{files}"


class SkillDisclosure:
    def __init__(self, index: SkillIndex) -> None:
        self.index = index
        self._by_name = {s.name: s for s in (*index.general, *index.candidates)}

    def system_prompt(self, query: str) -> str:
        """The skills part of an episode's system prompt for task ``query``."""
        chosen = self.index.retrieve(query)
        lowered = query.lower()
        shown = [s for s in chosen if s.general or any(t.lower() in lowered for t in s.triggers)]
        listed = [s for s in chosen if s not in shown]
        parts = [full(s) for s in shown]
        if listed:
            parts.append(HEADER + "\n" + "\n".join(f"- {s.metadata()}" for s in listed))
        return "\n\n".join(parts)

    def opening(self, messages: Sequence[dict]) -> list[dict]:
        """``messages`` with the skills prompt for their last user message added to the
        system message (one is made when there is none; no skills: unchanged)."""
        prompt = self.system_prompt(last_user(messages))
        if not prompt:
            return list(messages)
        if messages and messages[0]["role"] == "system":
            head = {**messages[0], "content": f"{messages[0]['content']}\n\n{prompt}"}
            return [head, *messages[1:]]
        return [{"role": "system", "content": prompt}, *messages]

    def read(self, name: str) -> str:
        """Skill ``name`` in full; an unknown name lists the known ones."""
        if name not in self._by_name:
            return f"no skill {name!r}; skills: {', '.join(sorted(self._by_name))}"
        return full(self._by_name[name])

    def tool(self) -> Tool:
        return read_skill_tool(self.read)


def last_user(messages: Sequence[dict]) -> str:
    return str(next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))


def read_skill_tool(read: Callable[[str], str]) -> Tool:
    """``read_skill(name)``, answered by ``read``."""
    def read_skill(name: str) -> str:
        """Read a skill's full procedure.

        Args:
            name: The skill's name, as listed in the system prompt.
        """
        return read(name)

    return Tool(read_skill)
