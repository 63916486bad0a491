"""Synthetic users with known preferences, to measure personalised reward models (P-GenRM's
prototypes, ``models.preference_prototypes``; docs/reward_models.md).

A user belongs to one of ``n_types`` types; its preference vector is the type's plus its own
deviation (``spread``), unit length. Responses and queries are random vectors; of two
responses the user prefers the one its vector scores higher. Each user has a ``history`` of
such judgements (what the model reads) and separate train and held-out pairs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posttrain.models.preference_prototypes import PreferencePrototypes


@dataclass
class Pairs:
    """Judgements: ``users [N]``, ``query``, ``chosen``, ``rejected`` ``[N, d]``."""

    users: torch.Tensor
    query: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor


@dataclass
class SyntheticUsers:
    weights: torch.Tensor  # [U, d], each user's true preference
    types: torch.Tensor  # [U]
    history_q: torch.Tensor  # [U, H, d]
    history_diff: torch.Tensor  # [U, H, d]: chosen minus rejected
    train: Pairs
    test: Pairs


def _judged(weights: torch.Tensor, users: torch.Tensor, dim: int,
            g: torch.Generator) -> Pairs:
    n = len(users)
    a, b = torch.randn(n, dim, generator=g), torch.randn(n, dim, generator=g)
    first = ((weights[users] * (a - b)).sum(dim=-1) > 0)[:, None]
    return Pairs(users, torch.randn(n, dim, generator=g), torch.where(first, a, b),
                 torch.where(first, b, a))


def synthetic_users(n_users: int = 64, n_types: int = 4, dim: int = 16, history: int = 8,
                    pairs: int = 16, test_pairs: int = 16, spread: float = 0.5,
                    seed: int = 0) -> SyntheticUsers:
    """Users, their histories and ``pairs`` train and ``test_pairs`` held-out judgements each
    (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(n_types, dim, generator=g), dim=-1)
    types = torch.randint(n_types, (n_users,), generator=g)
    weights = torch.nn.functional.normalize(
        centres[types] + spread * torch.randn(n_users, dim, generator=g) / dim ** 0.5, dim=-1)
    past = _judged(weights, torch.arange(n_users).repeat_interleave(history), dim, g)
    return SyntheticUsers(
        weights, types, past.query.view(n_users, history, dim),
        (past.chosen - past.rejected).view(n_users, history, dim),
        _judged(weights, torch.arange(n_users).repeat_interleave(pairs), dim, g),
        _judged(weights, torch.arange(n_users).repeat_interleave(test_pairs), dim, g))


def prototype_deltas(model: PreferencePrototypes, data: SyntheticUsers, pairs: Pairs
                     ) -> torch.Tensor:
    """The model's ``Delta`` of each pair, its user's history attached."""
    return model.delta(pairs.users, pairs.query, pairs.chosen, pairs.rejected,
                       data.history_q[pairs.users], data.history_diff[pairs.users])


def train_prototypes(model: PreferencePrototypes, data: SyntheticUsers, steps: int = 200,
                     lr: float = 0.03, lam_cent: float = 5.0, lam_tr: float = 5.0,
                     weight_decay: float = 0.1, seed: int = 0) -> list[float]:
    """AdamW on the train pairs (full batch), the module initialised from the histories
    first; returns the loss of every step."""
    torch.manual_seed(seed)
    model.initialise(data.history_diff, seed)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    t = data.train
    for _ in range(steps):
        loss = model.loss(t.users, t.query, t.chosen, t.rejected, data.history_q[t.users],
                          data.history_diff[t.users], lam_cent, lam_tr)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses


def accuracy(deltas: torch.Tensor) -> float:
    """The share of pairs whose chosen response the model prefers (``Delta > 0``)."""
    return float((deltas > 0).float().mean())


def global_deltas(data: SyntheticUsers, steps: int = 300, lr: float = 0.05) -> torch.Tensor:
    """The held-out ``Delta`` of one preference vector for everyone (Bradley-Terry on all
    train pairs): the unpersonalised baseline."""
    w = torch.zeros(data.weights.shape[1], requires_grad=True)
    optim = torch.optim.Adam([w], lr=lr)
    diff = data.train.chosen - data.train.rejected
    for _ in range(steps):
        loss = -torch.nn.functional.logsigmoid(diff @ w).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    return (data.test.chosen - data.test.rejected) @ w.detach()
