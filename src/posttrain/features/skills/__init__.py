"""Skills: directories an agent reads at run time (``SKILL.md``: front matter with name,
description, triggers, version; the procedure below it; optional ``scripts/`` and
``references/``), kept in a ``SkillBank`` that validates them (a leakage audit), retrieves the
relevant ones for a task (BM25 + an embedding, general skills always on), discloses them to
an agent progressively (``SkillDisclosure``: a system prompt and a ``read_skill`` tool) and
maintains them (add, merge, discard, with version bumps). A run uses a bank through a
``SkillLibrary`` (every task opens with its skills; ``run_skill_script`` runs a skill's
scripts in the sandbox), SkillRL's ``SkillEvolution`` grows it with a teacher during RL, and
``skills_bench`` is the SkillsBench protocol. docs/skills.md.

As a feature (``run``): a run's tasks open with the ``skills`` section's library, a teacher
evolves it after each RL update, and checkpoints keep the evolving bank."""

import lazy_loader

from posttrain.hooks import Feature

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

FEATURE = Feature("skills", order=85, package=__name__, prepare_tasks=".run:with_skills",
                  after_update=".run:evolution", checkpoint=".run:evolving_bank",
                  resume=".run:restore_bank")
