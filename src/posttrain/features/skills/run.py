"""Skills in a run (docs/skills.md): the run's ``SkillLibrary`` (the bank of ``skills.dir``,
or with a teacher the run's own copy of it, ``<out_dir>/skills``) that every task opens with,
SkillRL's evolution of it after RL steps (the bank checkpointed and resumed with the run), and
the SkillsBench protocol on a model: the held-out tasks without skills, with the bank's and
with skills the model writes itself, and the normalised gain."""

from __future__ import annotations

from pathlib import Path

from posttrain.config.extension import load_extension
from posttrain.config.sections.skills import SkillsConfig
from posttrain.engines import Engine
from posttrain.engines.chat import engine_chat
from posttrain.features.skills import SkillBank
from posttrain.features.skills.bench import SelfWrittenSkills, skills_bench
from posttrain.features.skills.evolution import SkillEvolution
from posttrain.features.skills.library import SkilledTask, SkilledTasks, SkillLibrary, bank_copy
from posttrain.features.skills.teacher import ChatTeacher
from posttrain.recipes.judges.chats import ServedChats
from posttrain.rollout.evaluation import eval_episodes, pass_rates

NAME = "skills"  # the feature's name: its library in a run's ``state``
RUN_BANK = "skills"  # the run's own bank, under out_dir, when a teacher evolves it
SKILL_BANK = "skill_bank"  # the checkpoint cursor's copy of an evolving bank


def skill_library(s: SkillsConfig, out: Path | None) -> SkillLibrary:
    """The library of the run whose ``skills`` section is ``s`` and directory ``out`` (None:
    a command that only samples reads the bank as it is, teacher or not)."""
    bank = SkillBank(s.dir) if s.teacher is None or out is None else \
        bank_copy(s.dir, out / RUN_BANK)
    return SkillLibrary(bank, s.lam, s.threshold, s.top_k)


def with_skills(run, out: Path | None) -> None:
    """``run`` (a ``RunTasks``) with the ``skills`` section's library: its tools offered
    (``skills.tools``), every task and held-out task opening with the skills disclosed."""
    if run.cfg.skills is None:
        return
    library = run.state[NAME] = skill_library(run.cfg.skills, out)
    if run.tools is not None and run.cfg.skills.tools:
        for tool in library.tools():
            run.tools.add(tool)
    run.tasks = SkilledTasks(run.tasks, library)
    run.eval_tasks = [library.task(t) for t in run.eval_tasks]


def evolving_bank(parts) -> dict:
    """The checkpoint's copy of a bank a teacher evolves (nothing for a fixed bank)."""
    s = parts.cfg.skills
    return {} if s is None or s.teacher is None else {SKILL_BANK: parts.state[NAME].snapshot()}


def restore_bank(parts, cursor: dict) -> None:
    """The bank as the checkpoint ``cursor`` kept it."""
    if SKILL_BANK in cursor:
        parts.state[NAME].restore(cursor[SKILL_BANK])


def evolution(parts, tokenizer) -> SkillEvolution | None:
    """SkillRL's evolution of the run's library after each RL update, with the configured
    teacher (None without one)."""
    cfg, s = parts.cfg, parts.cfg.skills
    if s is None or s.teacher is None:
        return None
    t = s.teacher
    teacher = load_extension("skill_teacher", t.function) if t.function is not None else \
        ChatTeacher(ServedChats(cfg.trainer.compute_dtype, cfg.seed).chat(t), t.skill_prompt,
                    t.lesson_prompt)
    return SkillEvolution(parts.state[NAME], teacher, tokenizer, cfg.reward.accuracy_part,
                          s.evolve_every, s.per_round, s.evolve_below)


def run_skills_bench(parts, engine: Engine, tokenizer, max_new_tokens: int = 256) -> dict:
    """The SkillsBench protocol on the held-out tasks of ``parts`` (a ``RunParts`` with a
    ``skills`` section) played by ``engine``: ``skills_bench``'s report, each condition's
    pass rate the accuracy over ``eval.samples`` samples a task. The model writes its own
    skills with ``max_new_tokens`` at the evaluation's temperature."""
    cfg, library = parts.cfg, parts.state.get(NAME)
    if library is None:
        raise ValueError("the skills protocol needs a skills section (skills.dir: the bank)")

    def played(tasks) -> list[float]:
        episodes = eval_episodes(engine, tokenizer, tasks, parts.reward_fn, cfg.eval,
                                       cfg.seed, parts.rollout_fn)
        return pass_rates(episodes, cfg.eval.samples, cfg.reward.accuracy_part)

    plain = [t.task if isinstance(t, SkilledTask) else t for t in parts.eval_tasks]
    chat = engine_chat(engine, tokenizer, max_new_tokens, cfg.eval.temperature, cfg.seed)
    return skills_bench(played, plain, library, SelfWrittenSkills(chat))
