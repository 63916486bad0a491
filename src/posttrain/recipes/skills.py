"""Skills in a run (docs/skills.md): the run's ``SkillLibrary`` (the bank of ``skills.dir``,
or with a teacher the run's own copy of it, ``<out_dir>/skills``), SkillRL's evolution of it
after RL steps, and the SkillsBench protocol on a model: the held-out tasks without skills,
with the bank's and with skills the model writes itself, and the normalised gain."""

from __future__ import annotations

from pathlib import Path

from posttrain.config import RunConfig
from posttrain.config.extension import load_extension
from posttrain.config.sections.skills import SkillsConfig
from posttrain.engines import Engine
from posttrain.engines.chat import engine_chat
from posttrain.recipes.judges.chats import ServedChats
from posttrain.rollout.evaluation import eval_episodes, pass_rates
from posttrain.skills import SkillBank
from posttrain.skills.bench import SelfWrittenSkills, skills_bench
from posttrain.skills.evolution import SkillEvolution
from posttrain.skills.library import SkilledTask, SkillLibrary, bank_copy
from posttrain.skills.teacher import ChatTeacher

RUN_BANK = "skills"  # the run's own bank, under out_dir, when a teacher evolves it


def skill_library(s: SkillsConfig, out: Path | None) -> SkillLibrary:
    """The library of the run whose ``skills`` section is ``s`` and directory ``out`` (None:
    a command that only samples reads the bank as it is, teacher or not)."""
    bank = SkillBank(s.dir) if s.teacher is None or out is None else \
        bank_copy(s.dir, out / RUN_BANK)
    return SkillLibrary(bank, s.lam, s.threshold, s.top_k)


def skill_evolution(cfg: RunConfig, library: SkillLibrary, tokenizer) -> SkillEvolution | None:
    """SkillRL's evolution of ``library`` with the configured teacher (None without one)."""
    s = cfg.skills
    if s is None or s.teacher is None:
        return None
    t = s.teacher
    teacher = load_extension("skill_teacher", t.function) if t.function is not None else \
        ChatTeacher(ServedChats(cfg.trainer.compute_dtype, cfg.seed).chat(t), t.skill_prompt,
                    t.lesson_prompt)
    return SkillEvolution(library, teacher, tokenizer, cfg.reward.accuracy_part,
                          s.evolve_every, s.per_round, s.evolve_below)


def run_skills_bench(parts, engine: Engine, tokenizer, max_new_tokens: int = 256) -> dict:
    """The SkillsBench protocol on the held-out tasks of ``parts`` (a ``RunParts`` with a
    ``skills`` section) played by ``engine``: ``skills_bench``'s report, each condition's
    pass rate the accuracy over ``eval.samples`` samples a task. The model writes its own
    skills with ``max_new_tokens`` at the evaluation's temperature."""
    cfg = parts.cfg
    if parts.skills is None:
        raise ValueError("the skills protocol needs a skills section (skills.dir: the bank)")

    def played(tasks) -> list[float]:
        episodes = eval_episodes(engine, tokenizer, tasks, parts.reward_fn, cfg.eval,
                                       cfg.seed, parts.rollout_fn)
        return pass_rates(episodes, cfg.eval.samples, cfg.reward.accuracy_part)

    plain = [t.task if isinstance(t, SkilledTask) else t for t in parts.eval_tasks]
    chat = engine_chat(engine, tokenizer, max_new_tokens, cfg.eval.temperature, cfg.seed)
    return skills_bench(played, plain, parts.skills, SelfWrittenSkills(chat))
