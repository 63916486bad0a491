"""Reward-model training (docs/reward_models.md) on chosen/rejected pairs, in the shared pair loop
(``recipes.pair_loop``): a backbone with a scalar head (``load_value_model``) on the last token.
``bradley_terry`` scores each response alone; ``pairwise_classifier`` scores one rendering of
the question and both answers (``comparison_messages``), trained on both orders;
``pgenrm_pair`` trains P-GenRM's user prototypes (``UserPreferences``) on the frozen backbone's
text embeddings (``pooled_states``) and saves them beside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from posttrain.algos import get
from posttrain.config import RewardModelConfig
from posttrain.data.preference_pairs import PreferencePair, comparison_batch, pair_batch
from posttrain.models import (
    frozen,
    load_model,
    load_tokenizer,
    load_value_model,
    pooled_states,
    save_model,
    sequence_scores,
)
from posttrain.models.preference_prototypes import PreferencePrototypes, UserPreferences
from posttrain.recipes.build import RunParts
from posttrain.recipes.pair_loop import CHUNK, evaluate_pairs, run_pairs
from posttrain.recipes.placement import scalar_head_settings
from posttrain.reporting import Reporter, plot_stages
from posttrain.train import Trainer, build_optimizer, reward_model_step
from posttrain.train.losses import REWARD_MODEL_LOSSES as LOSSES
from posttrain.types import DataError

BATCHES = {"bradley_terry": pair_batch, "pairwise_classifier": comparison_batch}


def reward_model_eval(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                      loss: str = "bradley_terry") -> dict[str, float]:
    """Loss, accuracy (chosen preferred) and mean margin on ``pairs``."""
    with frozen(trainer.model) as model:
        return evaluate_pairs(tokenizer, pairs, lambda batch, n: LOSSES[loss](
            sequence_scores(model, batch.input_ids, batch.attention_mask), n), BATCHES[loss])


def run_reward_model(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                     cfg: RewardModelConfig, reporter: Reporter,
                     eval_pairs: Sequence[PreferencePair] = (), seed: int = 0, start_step: int = 0,
                     on_step_end: Callable[[int], None] | None = None) -> list[dict[str, float]]:
    """Train ``trainer``'s scalar-head model for steps ``start_step .. cfg.steps``; returns the
    held-out evaluations."""
    evaluate = (lambda: reward_model_eval(trainer, tokenizer, eval_pairs, cfg.loss)) \
        if eval_pairs else None
    return run_pairs(tokenizer, pairs, cfg, reporter, "reward_model", f"reward model ({cfg.loss})",
                     lambda batch, idx: trainer.apply(reward_model_step, batch, cfg.loss),
                     evaluate, seed, start_step, on_step_end, BATCHES[cfg.loss])


def train_reward_model(parts: RunParts, backbone: Path, out: Path) -> list[dict[str, float]]:
    """A reward model on ``rm``'s pairs from ``backbone`` (a scalar head on its decoder, or
    for ``pgenrm_pair`` user prototypes beside it), written to ``out``; returns the held-out
    evaluations."""
    cfg = parts.cfg
    if cfg.rm.loss == "pgenrm_pair":
        return train_prototypes(parts, backbone, out)
    tokenizer = load_tokenizer(backbone)
    trainer = Trainer(load_value_model(backbone), cfg.rm.optim, cfg.rm.steps,
                      scalar_head_settings(cfg))
    pairs, held_out = parts.preference_pairs(cfg.rm)
    evals = run_reward_model(trainer, tokenizer, pairs, cfg.rm, parts.reporter, held_out, cfg.seed)
    save_model(trainer.export_model(), tokenizer, out)
    plot_stages(parts.reporter.path, parts.out)
    return evals


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
