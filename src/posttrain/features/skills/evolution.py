"""SkillRL's recursive skill evolution during RL: after every ``every``-th step whose accuracy
is below ``below``, the teacher distils up to ``per_round`` of the step's failed episodes into
lessons and up to ``per_round`` of its successful ones into skills; each goes through the
bank's ``maintain`` (discarded when it leaks an episode's reference, merged into a near
skill, else added). Later episodes see the changed bank."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from posttrain.features.skills.library import SkillLibrary
from posttrain.features.skills.skill import SkillError
from posttrain.features.skills.teacher import SkillTeacher, as_skill
from posttrain.types import Episode

logger = logging.getLogger(__name__)

ACTIONS = ("add", "merge", "discard", "rejected", "failed")


class SkillEvolution:
    def __init__(self, library: SkillLibrary, teacher: SkillTeacher, tokenizer, accuracy_part: str,
                 every: int = 1, per_round: int = 2, below: float = 1.0) -> None:
        self.library, self.teacher, self.tokenizer = library, teacher, tokenizer
        self.accuracy_part, self.every = accuracy_part, every
        self.per_round, self.below = per_round, below

    def __call__(self, step: int, episodes: Sequence[Episode]) -> dict[str, float]:
        """Evolve the bank after step ``step`` (0-based) on its ``episodes``; the counts of
        ``skills/<action>`` and the bank's size ``skills/bank``."""
        counts = dict.fromkeys(ACTIONS, 0)
        solved = [e.rewards.get(self.accuracy_part, 0.0) >= 1.0 for e in episodes]
        accuracy = sum(solved) / max(len(episodes), 1)
        if episodes and (step + 1) % self.every == 0 and accuracy < self.below:
            for success in (False, True):
                chosen = [e for e, s in zip(episodes, solved) if s == success]
                for episode in chosen[: self.per_round]:
                    counts[self.teach(episode, success)] += 1
        return {f"skills/{a}": float(n) for a, n in counts.items()} | {
            "skills/bank": float(len(self.library.bank.skills))}

    def teach(self, episode: Episode, success: bool) -> str:
        """What became of the teacher's answer for ``episode``: a ``maintain`` action,
        ``rejected`` (no answer, or one that is no valid skill) or ``failed`` (the teacher
        raised: logged, and the run goes on)."""
        reference = str(episode.meta.get("reference", ""))
        trajectory = "".join(self.tokenizer.decode(s.token_ids) for s in episode.segments)
        try:
            skill = as_skill(self.teacher(trajectory, reference, success))
        except SkillError:
            return "rejected"
        except Exception as e:  # an endpoint down, a teacher's bug: no skill this time
            logger.warning("the skill teacher failed: %s: %s", type(e).__name__, e)
            return "failed"
        if skill is None:
            return "rejected"
        return self.library.maintain(skill, expected=[reference] if reference else [])
