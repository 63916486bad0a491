# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .audit import LeakageFinding, audit
from .bank import SkillBank
from .bench import SelfWrittenSkills, normalised_gain, skills_bench
from .disclosure import SkillDisclosure
from .evolution import SkillEvolution
from .library import SkilledTask, SkilledTasks, SkillLibrary
from .retrieval import SkillIndex, hashed_embedding
from .skill import (
    Skill,
    SkillError,
    bump,
    load_skill,
    parse_skill,
    skill_text,
    write_skill,
)
from .teacher import ChatTeacher

__all__ = ["ChatTeacher", "LeakageFinding", "SelfWrittenSkills", "Skill", "SkillBank",
           "SkillDisclosure", "SkillError", "SkillEvolution", "SkillIndex", "SkillLibrary",
           "SkilledTask", "SkilledTasks", "audit", "bump", "hashed_embedding", "load_skill",
           "normalised_gain", "parse_skill", "skill_text", "skills_bench", "write_skill"]
