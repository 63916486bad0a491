"""``SkillLibrary``: a skill bank as a run's harness uses it. Every task the run plays goes
through ``task`` (``SkilledTask``: its messages carry the disclosure of the bank's skills *as
they are when the episode starts*), the agent loop gets ``tools()`` (``read_skill`` and
``run_skill_script``), ``maintain`` changes the bank during the run (the index is rebuilt on
the next use) and ``snapshot`` / ``restore`` carry it through a checkpoint."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from posttrain.features.skills.bank import SkillBank
from posttrain.features.skills.disclosure import SkillDisclosure, read_skill_tool
from posttrain.features.skills.retrieval import Embed, SkillIndex, hashed_embedding
from posttrain.features.skills.scripts import run_script, run_script_tool
from posttrain.features.skills.skill import Skill
from posttrain.harness import Tool


class SkillLibrary:
    def __init__(self, bank: SkillBank, lam: float = 0.5, threshold: float = 0.3,
                 top_k: int = 3, embed: Embed = hashed_embedding) -> None:
        self.bank, self.embed = bank, embed
        self.options = {"lam": lam, "threshold": threshold, "top_k": top_k, "embed": embed}
        self._disclosure: SkillDisclosure | None = None
        self._withheld = False

    @property
    def disclosure(self) -> SkillDisclosure:
        """The disclosure of the bank's current skills (of none while ``withheld``)."""
        if self._withheld:
            return SkillDisclosure(SkillIndex([]))
        if self._disclosure is None:
            self._disclosure = SkillDisclosure(self.bank.index(**self.options))
        return self._disclosure

    @contextmanager
    def withheld(self) -> Iterator[None]:
        """Within it the agent is shown no skill and its skill tools find none (the
        protocol's conditions without the bank)."""
        self._withheld = True
        try:
            yield
        finally:
            self._withheld = False

    def opening(self, messages: Sequence[dict]) -> list[dict]:
        return self.disclosure.opening(messages)

    def task(self, task: Any) -> SkilledTask:
        return task if isinstance(task, SkilledTask) else SkilledTask(task, self.opening)

    def tools(self) -> list[Tool]:
        """``read_skill`` and ``run_skill_script`` over the bank's current skills."""
        return [read_skill_tool(lambda name: self.disclosure.read(name)),
                run_script_tool(self.run_script)]

    def run_script(self, skill: str, script: str, stdin: str = "") -> str:
        names = [] if self._withheld else [s.name for s in self.bank.skills]
        if skill not in names:
            return f"no skill {skill!r}; skills: {', '.join(names) or 'none'}"
        return run_script(self.bank.directory / skill, self.bank[skill].files, script, stdin)

    def maintain(self, candidate: Skill, expected: Iterable[str] = ()) -> str:
        """The bank's ``maintain`` decision for ``candidate`` (``add``, ``merge`` or
        ``discard``: it leaks one of the ``expected`` values)."""
        action, _ = self.bank.maintain(candidate, embed=self.embed, expected=expected)
        self._disclosure = None
        return action

    def snapshot(self) -> dict[str, str]:
        """Every file of the bank (its discarded skills too), by path relative to it."""
        root = self.bank.directory
        return {str(f.relative_to(root)): f.read_text(encoding="utf-8")
                for f in sorted(root.rglob("*")) if f.is_file()}

    def restore(self, files: dict[str, str]) -> None:
        """The bank as ``snapshot`` saw it."""
        root = self.bank.directory
        shutil.rmtree(root)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        self.bank, self._disclosure = SkillBank(root), None


class SkilledTask:
    """``task`` whose opening messages go through ``opening`` (a disclosure's: skills added
    to the system message) each time they are asked, so an episode sees the skills as they
    are then; every other attribute is the task's (``reference``, ``domain``, a dataset
    ``row``, ...)."""

    def __init__(self, task: Any, opening: Callable[[Sequence[dict]], list[dict]]) -> None:
        self.task, self.opening = task, opening

    def messages(self) -> list[dict]:
        return self.opening(self.task.messages())

    def __getattr__(self, name: str) -> Any:
        if name in ("task", "opening"):  # not yet set (unpickling)
            raise AttributeError(name)
        return getattr(self.task, name)


class SkilledTasks:
    """A task source whose tasks are ``SkilledTask`` (``sample`` and ``eval_set``); every
    other attribute is the source's."""

    def __init__(self, tasks: Any, library: SkillLibrary) -> None:
        self.tasks, self.library = tasks, library

    def sample(self, n: int, rng, *args, **kwargs) -> list[SkilledTask]:
        return [self.library.task(t) for t in self.tasks.sample(n, rng, *args, **kwargs)]

    def eval_set(self, n: int) -> list[SkilledTask]:
        return [self.library.task(t) for t in self.tasks.eval_set(n)]

    def __getattr__(self, name: str) -> Any:
        if name in ("tasks", "library"):
            raise AttributeError(name)
        return getattr(self.tasks, name)


def bank_copy(source: str | Path | None, target: Path) -> SkillBank:
    """The bank at ``target``, first copied from ``source`` (None: empty) when it does not
    exist: a run's own bank, which it may change."""
    if not target.exists():
        if source is not None:
            SkillBank(source)  # every skill must load before it is copied
            shutil.copytree(source, target)
        else:
            target.mkdir(parents=True)
    return SkillBank(target)
