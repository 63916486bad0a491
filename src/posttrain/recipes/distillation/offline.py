"""Offline knowledge distillation (docs/distillation.md) on chat data: the student matches the
teacher's next-token distribution at every assistant token — a live teacher's full one, or
stored top-k logits (``teacher_logits``) — with a catalogue divergence (``forward_kl``,
``reverse_kl``, ``jsd``, ``skew_fkl``, ``skew_rkl``, ``tvd``; ``uld`` also across
tokenizers). Batches follow SFT's cursor
(``batch_indices``), so a resumed run repeats the data; with GKD mixing (``lam``, live teacher
only) part of each batch is the student's own samples."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from posttrain.config.sections.distill import OFFLINE_DIVERGENCES
from posttrain.data.conversations import ConversationSegments, batch_indices
from posttrain.engines import Engine
from posttrain.models import (
    check_same_vocabulary,
    encode_prompt,
    load_model,
    load_tokenizer,
    stop_tokens,
)
from posttrain.models.devices import placed
from posttrain.recipes.build import RunParts
from posttrain.recipes.distillation.aligned_targets import AlignedConversations
from posttrain.recipes.distillation.teacher_logits import StoredLogits
from posttrain.recipes.distillation.teachers import model_targets
from posttrain.reporting import Reporter
from posttrain.train import Trainer, distill_step
from posttrain.types import Batch, Episode, SamplingParams, Segment

DIVERGENCES = OFFLINE_DIVERGENCES


def run_distill(trainer: Trainer, teacher: torch.nn.Module | StoredLogits, tokenizer,
                teacher_tokenizer, conversations: list[list[dict]], steps: int, batch_size: int,
                reporter: Reporter, divergence: str = "forward_kl", options: dict | None = None,
                seed: int = 0, start_step: int = 0,
                on_step_end: Callable[[int], None] | None = None, lam: float = 0.0,
                engine: Engine | None = None, max_new_tokens: int = 32,
                tools: Sequence[list[dict] | None] | None = None,
                ce_weight: float = 0.0) -> None:
    """Steps ``start_step .. steps`` of ``distill_step`` on the assistant tokens (conversation
    ``i`` rendered with ``tools[i]``, if given); a live teacher with another tokenizer
    scores its own rendering, aligned token to token (``AlignedConversations``; divergence
    ``uld``); stored logits must have been written for exactly this data
    (``teacher_tokenizer`` is then unused). GKD mixing: each conversation is replaced, with
    probability ``lam``, by the student's own answer to its prompt, sampled by ``engine``
    (which gets the student's weights after every step). ``ce_weight``: the SFT term's
    weight (``distill_step``)."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence {divergence!r}; offline distillation takes "
                         f"{', '.join(DIVERGENCES)}")
    if not 0 <= lam <= 1 or (lam > 0 and engine is None):
        raise ValueError(f"GKD mixing lam={lam} must lie in [0, 1] and needs an engine")
    tools = tools or [None] * len(conversations)
    encoded = ConversationSegments(tokenizer, conversations, tools)
    stored = isinstance(teacher, StoredLogits)
    if stored:
        if lam > 0:
            raise ValueError("GKD mixing scores the student's own samples: it needs a live "
                             "teacher, not stored logits")
        teacher.check([encoded[i] for i in range(len(encoded))],
                      trainer.model.get_output_embeddings().out_features)
    cross = not stored and tokenizer.get_vocab() != teacher_tokenizer.get_vocab()
    if cross and (divergence != "uld" or lam > 0):
        check_same_vocabulary(tokenizer, teacher_tokenizer, f"distill.divergence={divergence}"
                              f"{' with GKD mixing' if lam > 0 else ''} (a teacher with its "
                              "own tokenizer takes uld, without mixing)")
    aligned = AlignedConversations(tokenizer, teacher_tokenizer, encoded, ConversationSegments(
        teacher_tokenizer, conversations, tools)) if cross else None
    reporter.start(f"distill ({divergence})", steps, start_step)
    for step in range(start_step, steps):
        idx = batch_indices(step, batch_size, len(conversations), seed)
        rng = random.Random(f"{seed}:gkd:{step}")
        on_policy = [rng.random() < lam for _ in idx]
        segments = [encoded[i] for i, own in zip(idx, on_policy) if not own]
        prompts = [encode_prompt(tokenizer, conversations[i][:-1], tools=tools[i])
                   for i, own in zip(idx, on_policy) if own]
        if prompts:
            sampling = SamplingParams(max_new_tokens=max_new_tokens, seed=step,
                                      stop_token_ids=stop_tokens(tokenizer))
            segments += [Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)
                         for o in engine.generate(prompts, sampling)]
        batch = Batch.from_episodes([Episode([s]) for s in segments],
                                    pad_token_id=tokenizer.pad_token_id)
        if stored:
            targets = teacher.targets(idx)
        elif cross:
            targets = aligned.targets(teacher, idx)
        else:
            targets = model_targets(teacher)
        metrics = trainer.apply(distill_step, batch, targets, divergence, options or {},
                                ce_weight=ce_weight)
        metrics["on_policy"] = len(prompts) / len(idx)
        if engine is not None:
            engine.update_weights(trainer.named_weights(), step + 1)
        reporter.log("distill", step + 1, metrics)
        reporter.advance(step + 1, f"{divergence} {metrics['divergence']:.4f}")
        if on_step_end is not None:
            on_step_end(step + 1)
    reporter.finish()


def distill_stage(parts: RunParts, model, tokenizer, engine: Engine, ckpt: Path | None,
                  evals: dict):
    """The ``distill`` stage from ``distill.teacher`` or ``distill.logits`` (GKD samples with
    ``engine``); returns the trained model with whole weights."""
    cfg, d = parts.cfg, parts.cfg.distill
    trainer = Trainer(model, d.optim, d.steps, cfg.trainer, addons=parts.trainer_addons(model))
    start = parts.resume(ckpt, trainer)
    if d.teacher is not None:
        teacher = placed(load_model(d.teacher, cfg.trainer.compute_dtype), d.teacher_device)
        teacher_tok = load_tokenizer(d.teacher)
    else:
        teacher, teacher_tok = StoredLogits(d.logits), None
    if d.lam > 0:
        engine.update_weights(trainer.named_weights(), start)
    data = parts.distill_data()
    run_distill(trainer, teacher, tokenizer, teacher_tok, data.conversations, d.steps,
                d.batch_size, parts.reporter, d.divergence.name, d.divergence.hyperparameters(),
                cfg.seed, start, parts.checkpointer(trainer, tokenizer, "distill", evals),
                d.lam, engine if d.lam > 0 else None, d.max_new_tokens, data.tools,
                d.ce_weight)
    return trainer.export_model()
