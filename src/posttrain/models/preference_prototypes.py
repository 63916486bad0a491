"""P-GenRM's user prototypes (Zhang et al. 2026, arXiv 2602.12116): a user's
preference as their own embedding, their history read by attention, and prototypes shared by
similar users.

Per history item ``tau`` (query ``q``, chosen ``y+``, rejected ``y-``, as embeddings of size
``d``): ``o_tau = sigmoid(W [q_tau; y+_tau - y-_tau])``. For a new query ``q_t`` of user ``j``:
``alpha = softmax_tau(o_tau . q_t / sqrt d + rho o_tau . a_j / sqrt d)``,
``v_H = sum_tau alpha_tau o_tau``, ``z_t = a_j + lam_q W_q q_t + lam_s W_s v_H``, and the
preference of ``y+`` over ``y-`` is ``Delta = z_t . (y+ - y-)``. Training minimises the
catalogue's ``pgenrm_pair``: ``-log sigmoid(Delta)`` plus ``lam_cent ||a_j - mu_j||^2`` (the
centroid of the users sharing ``j``'s nearest prototype) and ``lam_tr ||a_j - p_j||^2`` (that
prototype). The user embeddings start at the mean of their history's ``y+ - y-`` and the
prototypes at those embeddings' k-means centroids. ``UserPreferences`` keeps a trained module
with its users' names and histories, saved beside a backbone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from posttrain.algos import get
from posttrain.models.loading import load_beside, save_beside


def kmeans(x: torch.Tensor, k: int, iters: int = 50, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(centroids [k, d], assignment [N])`` of ``x [N, d]``: k-means++ seeding (a seeded
    generator), then Lloyd's steps until the assignment stops changing (at most ``iters``);
    an emptied cluster keeps its centroid."""
    if not 1 <= k <= len(x):
        raise ValueError(f"kmeans: need 1 <= k <= {len(x)} points, got k={k}")
    g = torch.Generator().manual_seed(seed)
    centroids = x[torch.randint(len(x), (1,), generator=g)]
    while len(centroids) < k:
        d2 = torch.cdist(x, centroids).min(dim=1).values ** 2
        pick = torch.multinomial(d2 / d2.sum() if d2.sum() > 0 else torch.ones(len(x)), 1,
                                 generator=g)
        centroids = torch.cat([centroids, x[pick]])
    assign = torch.cdist(x, centroids).argmin(dim=1)
    for _ in range(iters):
        for c in range(k):
            if bool((assign == c).any()):
                centroids[c] = x[assign == c].mean(dim=0)
        new = torch.cdist(x, centroids).argmin(dim=1)
        if torch.equal(new, assign):
            break
        assign = new
    return centroids, assign


class PreferencePrototypes(nn.Module):
    """``n_users`` user embeddings and ``n_prototypes`` prototypes of size ``dim`` with the
    attention over a user's history (module docstring)."""

    def __init__(self, n_users: int, dim: int, n_prototypes: int, lam_q: float = 1.0,
                 lam_s: float = 1.0, rho: float = 1.0) -> None:
        super().__init__()
        self.users = nn.Parameter(torch.zeros(n_users, dim))
        self.prototypes = nn.Parameter(torch.zeros(n_prototypes, dim))
        self.summary = nn.Linear(2 * dim, dim, bias=False)  # W
        self.w_q = nn.Linear(dim, dim, bias=False)
        self.w_s = nn.Linear(dim, dim, bias=False)
        self.lam_q, self.lam_s, self.rho = lam_q, lam_s, rho

    @torch.no_grad()
    def initialise(self, history_diff: torch.Tensor, seed: int = 0) -> None:
        """``a_j`` = the mean of user ``j``'s history ``y+ - y-`` (``history_diff [U, H,
        d]``); the prototypes their k-means centroids."""
        start = history_diff.mean(dim=1)
        self.users.copy_(start)
        self.prototypes.copy_(kmeans(start, len(self.prototypes), seed=seed)[0])

    @torch.no_grad()
    def nearest(self) -> torch.Tensor:
        """``[U]``: each user's nearest prototype."""
        return torch.cdist(self.users, self.prototypes).argmin(dim=1)

    @torch.no_grad()
    def similar_users(self, user: int, n: int) -> list[int]:
        """Up to ``n`` users who share ``user``'s nearest prototype, nearest embedding first
        (the similar users whose chains P-GenRM aggregates at test time)."""
        nearest = self.nearest()
        peers = [j for j in torch.nonzero(nearest == nearest[user]).flatten().tolist()
                 if j != user]
        if not peers:
            return []
        distance = torch.cdist(self.users[user][None], self.users[peers])[0]
        return [peers[k] for k in distance.argsort().tolist()[:n]]

    def preference(self, users: torch.Tensor, query: torch.Tensor, history_q: torch.Tensor,
                   history_diff: torch.Tensor, user_emb: torch.Tensor | None = None
                   ) -> torch.Tensor:
        """``z_t [N, d]`` for users ``users [N]`` (or their embeddings ``user_emb``) asking
        ``query [N, d]`` with their histories ``[N, H, d]``."""
        a = self.users[users] if user_emb is None else user_emb
        scale = math.sqrt(query.shape[-1])
        o = torch.sigmoid(self.summary(torch.cat([history_q, history_diff], dim=-1)))
        logits = (o @ query[..., None]).squeeze(-1) / scale \
            + self.rho * (o @ a[..., None]).squeeze(-1) / scale
        v = (torch.softmax(logits, dim=-1)[..., None] * o).sum(dim=1)
        return a + self.lam_q * self.w_q(query) + self.lam_s * self.w_s(v)

    def delta(self, users: torch.Tensor, query: torch.Tensor, chosen: torch.Tensor,
              rejected: torch.Tensor, history_q: torch.Tensor, history_diff: torch.Tensor,
              user_emb: torch.Tensor | None = None) -> torch.Tensor:
        """``Delta = z_t . (y+ - y-)`` per pair ``[N]``."""
        z = self.preference(users, query, history_q, history_diff, user_emb)
        return (z * (chosen - rejected)).sum(dim=-1)

    def loss(self, users: torch.Tensor, query: torch.Tensor, chosen: torch.Tensor,
             rejected: torch.Tensor, history_q: torch.Tensor, history_diff: torch.Tensor,
             lam_cent: float = 0.0, lam_tr: float = 0.0) -> torch.Tensor:
        """The mean ``pgenrm_pair`` loss over the pairs; ``mu_j`` (no gradient) and ``p_j``
        come from each user's nearest prototype."""
        nearest = self.nearest()
        with torch.no_grad():
            centroids = torch.stack([self.users[nearest == c].mean(dim=0)
                                     if bool((nearest == c).any()) else self.prototypes[c]
                                     for c in range(len(self.prototypes))])
        cluster = nearest[users]
        return get("reward_model", "pgenrm_pair")(
            delta=self.delta(users, query, chosen, rejected, history_q, history_diff),
            user=self.users[users], centroid=centroids[cluster],
            prototype=self.prototypes[cluster], lam_cent=lam_cent, lam_tr=lam_tr).mean()


WEIGHTS, SETTINGS = "preference_prototypes.safetensors", "preference_prototypes.json"


@dataclass
class UserPreferences:
    """A trained ``PreferencePrototypes`` with its users' names and histories (``[U, H, d]``):
    what ``posttrain reward-model`` with ``rm.loss: pgenrm_pair`` writes beside its backbone,
    and what the judge ``prototypes`` reads. A response's score ``z_t . y`` makes ``Delta``
    the difference of two scores."""

    module: PreferencePrototypes
    users: list[str]
    history_q: torch.Tensor
    history_diff: torch.Tensor

    def index(self, names: Sequence[str]) -> torch.Tensor:
        """``[N]``: the users' rows; a user the module was not trained on raises
        ``KeyError``."""
        rows = {name: i for i, name in enumerate(self.users)}
        unknown = sorted({n for n in names if n not in rows})
        if unknown:
            raise KeyError(f"the prototypes know no user {', '.join(map(repr, unknown[:5]))}: "
                           f"they hold the {len(self.users)} users of their training pairs "
                           "(a new user needs pairs and a new run)")
        return torch.tensor([rows[n] for n in names], dtype=torch.long)

    def preference(self, names: Sequence[str], query: torch.Tensor) -> torch.Tensor:
        """``z_t [N, d]`` of each named user asking ``query [N, d]``."""
        users = self.index(names)
        return self.module.preference(users, query, self.history_q[users],
                                      self.history_diff[users])

    def scores(self, names: Sequence[str], query: torch.Tensor, reply: torch.Tensor
               ) -> torch.Tensor:
        """``[N]``: ``z_t . y`` of each reply for its user and query."""
        return (self.preference(names, query) * reply).sum(dim=-1)

    def save(self, directory: str | Path) -> None:
        """Weights and histories to ``WEIGHTS``, names and sizes to ``SETTINGS``
        (``save_beside``)."""
        m = self.module
        save_beside(directory, WEIGHTS,
                    {**{f"module.{k}": v for k, v in m.state_dict().items()},
                     "history_q": self.history_q, "history_diff": self.history_diff},
                    SETTINGS, {"users": self.users, "prototypes": len(m.prototypes),
                               "dim": m.users.shape[1], "lam_q": m.lam_q, "lam_s": m.lam_s,
                               "rho": m.rho})

    @classmethod
    def load(cls, directory: str | Path) -> UserPreferences:
        """What ``save`` wrote to ``directory``; ``FileNotFoundError`` names a missing file."""
        tensors, s = load_beside(directory, WEIGHTS, SETTINGS, "train prototypes with "
                                 "posttrain reward-model and rm.loss=pgenrm_pair")
        module = PreferencePrototypes(len(s["users"]), s["dim"], s["prototypes"], s["lam_q"],
                                      s["lam_s"], s["rho"])
        module.load_state_dict({k.removeprefix("module."): v for k, v in tensors.items()
                                if k.startswith("module.")})
        return cls(module.eval(), list(s["users"]), tensors["history_q"],
                   tensors["history_diff"])
