"""P-GenRM as a judge (ALGORITHMS.md §14 ``pgenrm``): evaluation chains for the user, and for
users like them, aggregated at test time."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.engines.chat import Chat
from posttrain.envs import Task
from posttrain.rewards.evaluation_chain import chain_messages, extract
from posttrain.rewards.judge import question_of
from posttrain.types import Episode


def pgenrm_score(own: Sequence[float | None], similar: Sequence[float | None]
                 ) -> float | None:
    """``s = (mean_x Extract(S_x) + mean_w Extract(S^(u_w))) / 2`` over the chains that parse:
    the user's ``m`` sampled analyses and one a similar user. The two means are averaged
    (§14 leaves it open; the sum would leave ``[0, 1]``); a side with no parse gives way to
    the other, and with none at all the score is missing (None)."""
    means = [statistics.fmean(v) for v in ([x for x in own if x is not None],
                                            [x for x in similar if x is not None]) if v]
    return statistics.fmean(means) if means else None


@dataclass
class PGenRMJudge:
    """Each answer judged for its task's user (``user``, or the task row's ``user_column``)
    in ``n_samples`` chains, and once for each profile in the row's ``similar_column`` (a
    list, one profile, or null; e.g. the users ``PreferencePrototypes.similar_users`` finds);
    ``pgenrm_score`` of the chains' ``extract`` on ``0..score_max``."""

    chat: Chat
    n_samples: int = 1
    score_max: float = 10.0
    user: str | None = None
    user_column: str | None = None
    similar_column: str | None = None

    def profiles(self, task: Task) -> tuple[str, list[str]]:
        row = getattr(task, "row", {})
        own = self.user if self.user is not None else row.get(self.user_column)
        if own is None:
            raise KeyError(f"pgenrm: the task row has no column {self.user_column!r} naming "
                           f"its user (columns: {', '.join(row) or 'none'})")
        similar = row.get(self.similar_column) if self.similar_column else None
        similar = [] if similar is None else [similar] if isinstance(similar, str) else similar
        return str(own), [str(p) for p in similar]

    def __call__(self, episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float | None]:
        asks, spans = [], []
        for episode, task in zip(episodes, tasks):
            own, similar = self.profiles(task)
            question, answer = question_of(task.messages()), episode.meta["completion"]
            start = len(asks)
            asks += [chain_messages(question, answer, p, self.score_max)
                     for p in [own] * self.n_samples + similar]
            spans.append((start, start + self.n_samples, len(asks)))
        scores = [extract(reply, self.score_max) for reply in self.chat(asks)]
        return [pgenrm_score(scores[a:b], scores[b:c]) for a, b, c in spans]
