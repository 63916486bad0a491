"""Skills: directories an agent reads at run time (``SKILL.md``: front matter with name,
description, triggers, version; the procedure below it; optional ``scripts/`` and
``references/``), kept in a ``SkillBank`` that validates them (a leakage audit), retrieves the
relevant ones for a task (BM25 + an embedding, general skills always on), discloses them to
an agent progressively (``SkillDisclosure``: a system prompt and a ``read_skill`` tool) and
maintains them (add, merge, discard, with version bumps). docs/skills.md."""

from posttrain.skills.audit import LeakageFinding, audit
from posttrain.skills.bank import SkillBank
from posttrain.skills.disclosure import SkillDisclosure
from posttrain.skills.retrieval import SkillIndex, hashed_embedding
from posttrain.skills.skill import Skill, SkillError, bump, load_skill, write_skill

__all__ = ["LeakageFinding", "Skill", "SkillBank", "SkillDisclosure", "SkillError", "SkillIndex",
           "audit", "bump", "hashed_embedding", "load_skill", "write_skill"]
