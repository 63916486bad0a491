"""Preference optimisation (DPO family, docs/preference.md) on chosen/rejected pairs, in the
shared pair loop (``recipes.pair_loop``). Reference log-probs come from the trainer's frozen
reference model, once for all pairs (``precompute``) or per step (``on_the_fly``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from posttrain.algos import entry, get, kto_reference_point
from posttrain.config import PreferenceConfig
from posttrain.data.preference_pairs import PreferencePair, mismatched_batch, pair_batch
from posttrain.engines import Engine
from posttrain.recipes.build import RunParts
from posttrain.recipes.pair_loop import CHUNK, evaluate_pairs, run_pairs
from posttrain.recipes.placement import reference_model
from posttrain.reporting import Reporter
from posttrain.train import Trainer, preference_step
from posttrain.train.losses import preference_loss
from posttrain.types import Batch


def needs_reference(loss: str) -> bool:
    return any(k.startswith("ref_") for k in inspect.signature(get("preference", loss)).parameters)


def reference_rows(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair]
                   ) -> list[torch.Tensor]:
    """Per-token reference log-probs of every row (``2i`` chosen, ``2i + 1`` rejected)."""
    rows: list[torch.Tensor] = []
    for i in range(0, len(pairs), CHUNK):
        batch = pair_batch(tokenizer, list(pairs[i : i + CHUNK]))
        ref = trainer.compute_logprobs(batch, reference=True)
        lengths = batch.attention_mask.sum(dim=1).tolist()
        rows += [ref[r, :n].clone() for r, n in enumerate(lengths)]
    return rows


def kto_reference(trainer: Trainer, tokenizer, pairs: list[PreferencePair], beta: float) -> float:
    """``z_ref = max(0, beta mean_i (ell_i - ell_ref_i))`` over mismatched (prompt, response)
    rows of the step's pairs (the catalogue's ``kto_reference_point``)."""
    batch = mismatched_batch(tokenizer, pairs)
    ell = (trainer.compute_logprobs(batch) * batch.loss_mask).sum(dim=1)
    ref = (trainer.compute_logprobs(batch, reference=True) * batch.loss_mask).sum(dim=1)
    return float(kto_reference_point(ell, ref, beta))


def stack_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


def preference_eval(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                    cfg: PreferenceConfig) -> dict[str, float]:
    """Loss, implicit-reward accuracy and margin of the policy on ``pairs`` (KTO's loss here
    around a reference point of 0)."""
    use_ref = needs_reference(cfg.loss.name)

    def pair_loss(batch: Batch, n: int):
        ref = trainer.compute_logprobs(batch, reference=True) if use_ref else None
        return preference_loss(cfg.loss.name, cfg.loss.hyperparameters(),
                               trainer.compute_logprobs(batch), batch.loss_mask, ref, n)

    return evaluate_pairs(tokenizer, pairs, pair_loss)


def run_preference(trainer: Trainer, tokenizer, pairs: Sequence[PreferencePair],
                   cfg: PreferenceConfig, reporter: Reporter,
                   eval_pairs: Sequence[PreferencePair] = (), seed: int = 0, start_step: int = 0,
                   on_step_end: Callable[[int], None] | None = None) -> list[dict[str, float]]:
    """Train for steps ``start_step .. cfg.steps``; returns the held-out evaluations."""
    use_ref = needs_reference(cfg.loss.name)
    if use_ref and trainer.ref_model is None:
        raise ValueError(f"preference loss {cfg.loss.name!r} needs a reference model")
    cached = reference_rows(trainer, tokenizer, pairs) if (
        use_ref and cfg.reference == "precompute") else None
    options = cfg.loss.hyperparameters()

    def step(batch: Batch, idx: list[int]) -> dict[str, float]:
        if cached is not None:
            rows = [cached[2 * i + side] for i in idx for side in (0, 1)]
            batch = batch.replace(ref_logprobs=stack_rows(rows, batch.input_ids.shape[1]))
        elif use_ref:
            batch = batch.replace(ref_logprobs=trainer.compute_logprobs(batch, reference=True))
        if not entry("preference", cfg.loss.name).takes("reference_point"):
            return trainer.apply(preference_step, batch, cfg.loss.name, options)
        z = kto_reference(trainer, tokenizer, [pairs[i] for i in idx], options.get("beta", 0.1))
        return trainer.apply(preference_step, batch, cfg.loss.name, options, z) | {
            "kto_reference_point": z}

    evaluate = (lambda: preference_eval(trainer, tokenizer, eval_pairs, cfg)) if eval_pairs \
        else None
    return run_pairs(tokenizer, pairs, cfg, reporter, "pref", f"preference ({cfg.loss.name})",
                     step, evaluate, seed, start_step, on_step_end)


def preference_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None,
                     evals: dict):
    """The ``pref`` stage, against a frozen copy of its starting model; returns the trained
    model with whole weights."""
    cfg = parts.cfg
    ref = reference_model(cfg, model, parts.start_dir("pref"), ckpt is not None)
    trainer = Trainer(model, cfg.pref.optim, cfg.pref.steps, cfg.trainer, ref_model=ref,
                      addons=parts.trainer_addons(model))
    start = parts.resume(ckpt, trainer)
    pairs, held_out = parts.preference_pairs(cfg.pref)
    run_preference(trainer, tokenizer, pairs, cfg.pref, parts.reporter, held_out, cfg.seed,
                   start, parts.checkpointer(trainer, tokenizer, "pref", evals))
    return trainer.export_model()
