"""The ``skills`` section: a skill bank in every episode of the run, retrieved and disclosed
(docs/skills.md), and SkillRL's teacher evolving it during RL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from posttrain.config.extension import extension
from posttrain.config.rules import unread
from posttrain.config.section import Section
from posttrain.config.served import FunctionOrServed, check_fields

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


class SkillTeacherConfig(FunctionOrServed):
    """SkillRL's teacher: ``function`` (a dotted path, ``f(trajectory, reference, success)``
    returning a ``Skill``, a ``SKILL.md`` text or None) or a chat model served from ``model``
    or ``endpoint``, asked ``skill_prompt`` for a successful episode and ``lesson_prompt`` for
    a failed one (``{trajectory}`` filled in) and replying with a ``SKILL.md``."""

    WHAT: ClassVar[str] = "skill teacher"
    PROMPTS: ClassVar[tuple[str, ...]] = ("skill_prompt", "lesson_prompt")
    function: Annotated[str, extension("skill_teacher")] | None = Field(
        None, description="f(trajectory, reference, success) by dotted path (or a served model)")
    skill_prompt: str = Field(
        SKILL_PROMPT,
        description="what a served teacher is asked for a successful episode; {trajectory}")
    lesson_prompt: str = Field(
        LESSON_PROMPT,
        description="what a served teacher is asked for a failed episode; {trajectory}")
    endpoint_model: str = Field("teacher", description="the model name sent to the endpoint")

    @model_validator(mode="after")
    def _prompt_fields(self) -> SkillTeacherConfig:
        check_fields(self.skill_prompt, "skill_prompt", trajectory="")
        check_fields(self.lesson_prompt, "lesson_prompt", trajectory="")
        return self


class SkillsConfig(Section):
    """Skills in every episode of the run (docs/skills.md): the bank at ``dir``, each task
    getting its general skills and up to ``top_k`` others with hybrid relevance ``Rel =
    lam * cosine + (1 - lam) * BM25`` (each min-max normalised) of at least ``threshold``;
    through the agent loop, ``tools`` adds ``read_skill`` and ``run_skill_script``. With a
    ``teacher``, the RL stage evolves the run's own copy of the bank (``<out_dir>/skills``):
    after every ``evolve_every``-th step whose accuracy is below ``evolve_below``, up to
    ``per_round`` failed episodes become lessons and as many successful ones skills."""

    dir: str | None = Field(
        None,
        description="the skill bank: a directory of skill directories (null: the teacher writes "
                    "one)")
    lam: float = Field(
        0.5, ge=0, le=1,
        description="retrieval relevance: lam * cosine + (1 - lam) * BM25, in [0, 1]")
    threshold: float = Field(0.3, description="the least relevance a retrieved skill has")
    top_k: int = Field(3, ge=0, description="most skills retrieved a task besides the general ones")
    tools: bool = Field(True, description="add read_skill and run_skill_script to the agent loop")
    teacher: SkillTeacherConfig | None = Field(
        None, description="SkillRL's teacher that evolves the bank during RL (null: fixed bank)")
    evolve_every: int = Field(1, ge=1,
                              description="evolve the bank after every this-many-th RL step")
    per_round: int = Field(2, ge=1,
                           description="most lessons, and as many skills, written each time")
    evolve_below: float = Field(
        1.0, ge=0, le=1,
        description="evolve only after a step whose accuracy is below this, in [0, 1]")

    @field_validator("dir")
    @classmethod
    def _bank_exists(cls, directory: str | None) -> str | None:
        """The bank's skills load when the run builds its parts (``SkillError`` names each)."""
        if directory is not None and not Path(directory).is_dir():
            raise ValueError(f"no skill bank at {directory} (a directory of skill "
                             "directories, each with a SKILL.md)")
        return directory

    @model_validator(mode="after")
    def _something_to_disclose(self) -> SkillsConfig:
        if self.dir is None and self.teacher is None:
            raise ValueError("skills needs a bank (dir) or a teacher that writes one")
        return self

    def check(self, cfg) -> None:
        """Skills are disclosed in a task's opening messages, and evolve during RL."""
        if cfg.task.env is not None:
            raise ValueError("skills are disclosed in a task's opening messages; episodes of "
                             "task.env open with their environment's own")
        if self.teacher is None:
            unread(self, "skills", ("evolve_every", "per_round", "evolve_below"),
                   "skills evolve only with a teacher (skills.teacher)")
        elif "rl" not in cfg.stages:
            raise ValueError("skills.teacher evolves the bank during the rl stage, which this "
                             "run does not have")
        elif cfg.dist.trainer_processes > 1:
            raise ValueError("skills.teacher evolves one bank, in one process: it cannot run "
                             "with dist.trainer_processes > 1")
        if cfg.single_turn:
            unread(self, "skills", ("tools",), "single-turn episodes have no tools")
