"""Training P-GenRM's user prototypes (``rm.loss: pgenrm_pair``, ``posttrain reward-model``):
``UserPreferences`` on the frozen backbone's text embeddings (``pooled_states``), saved beside
it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from posttrain.algos import get
from posttrain.data.preference_pairs import PreferencePair, pair_batch
from posttrain.models import load_model, load_tokenizer, pooled_states, save_model
from posttrain.models.preference_prototypes import PreferencePrototypes, UserPreferences
from posttrain.recipes.build import RunParts
from posttrain.recipes.pair_loop import CHUNK, run_pairs
from posttrain.reporting import plot_stages
from posttrain.train import build_optimizer
from posttrain.types import DataError


def prototypes_trainer(rm) -> Callable[[RunParts, Path, Path], list[dict[str, float]]] | None:
    """``train_prototypes`` when the reward model is ``rm.loss: pgenrm_pair``."""
    return train_prototypes if rm.loss == "pgenrm_pair" else None


PairEmbeddings = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # query, chosen, rejected


def embed_pairs(model, tokenizer, pairs: Sequence[PreferencePair]) -> PairEmbeddings:
    """``(query, chosen, rejected)``, each ``[N, d]``: ``pooled_states`` of every pair's
    prompt and of its two replies."""
    rows = []
    for i in range(0, len(pairs), CHUNK):
        b = pair_batch(tokenizer, list(pairs[i : i + CHUNK]))
        prompt, reply = pooled_states(model, b.input_ids, b.attention_mask, b.loss_mask)
        rows.append((prompt[0::2], reply[0::2], reply[1::2]))
    return tuple(torch.cat(parts) for parts in zip(*rows))


def user_histories(names: list[str], users: torch.Tensor, emb: PairEmbeddings, size: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(history_q, history_diff)`` ``[U, size, d]``: each user's first ``size`` train pairs,
    repeated in order when they have fewer."""
    query, chosen, rejected = emb
    picks = []
    for j in range(len(names)):
        own = torch.nonzero(users == j).flatten()
        picks.append(own[torch.arange(size) % len(own)])
    pick = torch.stack(picks)
    return query[pick], (chosen - rejected)[pick]


def pair_users(pairs: Sequence[PreferencePair], what: str) -> list[str]:
    """Each pair's user; a pair without one raises ``DataError``."""
    missing = sum(p.user is None for p in pairs)
    if missing:
        raise DataError(f"rm.loss=pgenrm_pair: {missing} of the {len(pairs)} {what} pairs name "
                        "no user (add a 'user' column to rm.data)")
    return [p.user for p in pairs]


def train_prototypes(parts: RunParts, backbone: Path, out: Path) -> list[dict[str, float]]:
    """P-GenRM's prototypes (``rm.prototypes``) on ``rm``'s pairs, the ``backbone`` frozen:
    its ``pooled_states`` embed each prompt and reply; each user's embedding starts at their
    history's mean ``y+ - y-`` and the prototypes at those means' k-means centroids; AdamW
    (``rm.optim``) minimises ``pgenrm_pair``. Held-out pairs of users without train pairs
    are left out (their number reported). Writes the backbone and the ``UserPreferences``
    to ``out``; returns the held-out evaluations."""
    cfg, rm = parts.cfg, parts.cfg.rm
    p = rm.prototypes
    tokenizer, model = load_tokenizer(backbone), load_model(backbone).eval()
    pairs, held_out = parts.preference_pairs(rm)
    names = sorted(set(pair_users(pairs, "train")))
    if p.count > len(names):
        raise DataError(f"rm.prototypes.count={p.count} prototypes for {len(names)} users: "
                        "set it to at most the number of users")
    row = {name: j for j, name in enumerate(names)}
    pair_users(held_out, "held-out")
    unknown = [q for q in held_out if q.user not in row]
    held_out = [q for q in held_out if q.user in row]
    if unknown:
        parts.reporter.message(f"{len(unknown)} held-out pairs of users without train pairs "
                               "are left out of the evaluation")
    train_emb = embed_pairs(model, tokenizer, pairs)
    users = torch.tensor([row[q.user] for q in pairs])
    history = user_histories(names, users, train_emb, p.history)
    torch.manual_seed(cfg.seed)
    module = PreferencePrototypes(len(names), train_emb[0].shape[1], p.count, p.lam_q, p.lam_s,
                                  p.rho)
    module.initialise(history[1], cfg.seed)
    prefs = UserPreferences(module, names, *history)
    optim, schedule = build_optimizer(module, rm.optim, rm.steps)

    def step(_batch, idx: list[int]) -> dict[str, float]:
        i = torch.tensor(idx)
        loss = module.loss(users[i], train_emb[0][i], train_emb[1][i], train_emb[2][i],
                           history[0][users[i]], history[1][users[i]], p.lam_cent, p.lam_tr)
        optim.zero_grad()
        loss.backward()
        if rm.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), rm.optim.grad_clip)
        optim.step()
        schedule.step()
        with torch.no_grad():
            delta = module.delta(users[i], train_emb[0][i], train_emb[1][i], train_emb[2][i],
                                 history[0][users[i]], history[1][users[i]])
        return {"loss": loss.item(), "reward_accuracy": float((delta > 0).float().mean())}

    evaluate = None
    if held_out:
        eval_emb = embed_pairs(model, tokenizer, held_out)
        eval_names = [q.user for q in held_out]

        @torch.no_grad()
        def evaluate() -> dict[str, float]:
            query, chosen, rejected = eval_emb
            good, bad = (prefs.scores(eval_names, query, y) for y in (chosen, rejected))
            delta = good - bad
            return {"loss": float(get("reward_model", "bradley_terry")(
                        chosen_scores=good, rejected_scores=bad).mean()),
                    "reward_accuracy": float((delta > 0).float().mean()),
                    "margin": float(delta.mean()), "unknown_users": float(len(unknown))}

    evals = run_pairs(tokenizer, pairs, rm, parts.reporter, "reward_model",
                      "reward model (pgenrm_pair)", step, evaluate, cfg.seed,
                      make_batch=lambda tokenizer, batch: None)
    save_model(model, tokenizer, out)
    prefs.save(out)
    plot_stages(parts.reporter.path, parts.out)
    return evals
