"""P-GenRM as a judge (Zhang et al. 2026, arXiv 2602.12116): evaluation chains for the user, and for
users like them, aggregated at test time; or its user prototypes' score of each answer."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posttrain.engines.chat import Chat
from posttrain.envs import Task
from posttrain.models import pooled_states
from posttrain.models.devices import model_device
from posttrain.models.preference_prototypes import UserPreferences
from posttrain.rewards.evaluation_chain import chain_messages, extract
from posttrain.rewards.judge import question_of
from posttrain.types import Batch, Episode


def task_user(task: Task, user: str | None, column: str | None, judge: str) -> str:
    """``user`` when set, else the task row's ``column``; a row without it raises
    ``KeyError``."""
    if user is not None:
        return user
    row = getattr(task, "row", {})
    if row.get(column) is None:
        raise KeyError(f"{judge}: the task row has no column {column!r} naming its user "
                       f"(columns: {', '.join(row) or 'none'})")
    return str(row[column])


def pgenrm_score(own: Sequence[float | None], similar: Sequence[float | None]
                 ) -> float | None:
    """``s = (mean_x Extract(S_x) + mean_w Extract(S^(u_w))) / 2`` over the chains that parse:
    the user's ``m`` sampled analyses and one a similar user. The two means are averaged
    (the paper writes the sum, which would leave ``[0, 1]``); a side with no parse gives way to
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
        own = task_user(task, self.user, self.user_column, "pgenrm")
        similar = getattr(task, "row", {}).get(self.similar_column) \
            if self.similar_column else None
        similar = [] if similar is None else [similar] if isinstance(similar, str) else similar
        return own, [str(p) for p in similar]

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


@dataclass
class PrototypeJudge:
    """Each answer's ``z_t . y`` under ``prefs`` for its task's user (``user``, or the task
    row's ``user_column``): the backbone ``model``'s ``pooled_states`` of the episode's last
    segment give the query ``q_t`` and the reply ``y`` (a segment starts with a prompt token).
    An episode whose last segment has no reply token is unscored (None)."""

    model: torch.nn.Module
    prefs: UserPreferences
    pad_token_id: int
    user: str | None = None
    user_column: str | None = None
    micro_batch_size: int = 16

    @torch.no_grad()
    def __call__(self, episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float | None]:
        names = [task_user(t, self.user, self.user_column, "prototypes") for t in tasks]
        scored = [i for i, ep in enumerate(episodes) if any(ep.segments[-1].loss_mask)]
        out: list[float | None] = [None] * len(episodes)
        for k in range(0, len(scored), self.micro_batch_size):
            rows = scored[k : k + self.micro_batch_size]
            b = Batch.from_episodes([Episode([episodes[i].segments[-1]]) for i in rows],
                                    self.pad_token_id).to(model_device(self.model))
            query, reply = pooled_states(self.model, b.input_ids, b.attention_mask, b.loss_mask)
            scores = self.prefs.scores([names[i] for i in rows], query.cpu(), reply.cpu())
            for i, score in zip(rows, scores.tolist()):
                out[i] = score
        return out
