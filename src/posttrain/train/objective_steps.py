"""One optimiser step of each offline objective on a ``Trainer``: next-token NLL (SFT),
preference losses on pairs, reward-model losses, and distillation from teacher distributions.
Each builds the micro-batch loss and hands it to ``Trainer.optimizer_step``; run them through
``trainer.apply(step, ...)`` so they run where the trainer lives."""

from __future__ import annotations

from collections.abc import Callable

from posttrain.algos import StepNorm, get
from posttrain.models import sequence_scores, token_distributions
from posttrain.train.losses import REWARD_MODEL_LOSSES, preference_loss, sft_loss
from posttrain.train.trainer import Trainer
from posttrain.types import Batch


def sft_step(trainer: Trainer, batch: Batch) -> dict[str, float]:
    """One optimiser step of next-token NLL on ``batch.loss_mask`` tokens."""

    def micro(mb: Batch, norm: StepNorm):
        logp, _ = trainer.token_logprobs(trainer.model, mb, 1.0, entropy=False)
        return sft_loss(logp, mb.loss_mask, norm), {}

    return trainer.optimizer_step(batch, micro)


def pair_step(trainer: Trainer, batch: Batch, pair_loss: Callable[[Batch, int], tuple]
              ) -> dict[str, float]:
    """One optimiser step on pairs (rows ``2i``: chosen, ``2i + 1``: rejected);
    ``pair_loss(micro_batch, pairs)`` normalises by the step's pair count, and no micro-batch
    splits a pair."""
    if len(batch) % 2:
        raise ValueError("a preference batch holds pairs: an even number of rows")
    pairs = len(batch) // 2
    size = 2 * max(1, trainer.settings.micro_batch_size // 2)
    return trainer.optimizer_step(batch, lambda mb, norm: pair_loss(mb, pairs), micro_size=size)


def preference_step(trainer: Trainer, batch: Batch, loss: str, options: dict,
                    reference_point: float = 0.0) -> dict[str, float]:
    """One optimiser step of preference loss ``loss`` on pairs, against
    ``batch.ref_logprobs`` where the loss needs them (``reference_point``: KTO's ``z_ref``)."""

    def pair_loss(mb: Batch, pairs: int):
        logp, _ = trainer.token_logprobs(trainer.model, mb, 1.0, entropy=False)
        return preference_loss(loss, options, logp, mb.loss_mask, mb.ref_logprobs, pairs,
                               reference_point)

    return pair_step(trainer, batch, pair_loss)


def reward_model_step(trainer: Trainer, batch: Batch, loss: str = "bradley_terry"
                      ) -> dict[str, float]:
    """One optimiser step of ``bradley_terry`` (rows: chosen, rejected) or
    ``pairwise_classifier`` (rows: both orders of a pair rendered as one comparison) with the
    model's scalar head on each row's last token."""
    fn = REWARD_MODEL_LOSSES[loss]
    return pair_step(trainer, batch, lambda mb, pairs: fn(
        sequence_scores(trainer.model, mb.input_ids, mb.attention_mask), pairs))


def distill_step(trainer: Trainer, batch: Batch, teacher: Callable[[Batch], list],
                 divergence: str, options: dict, temperature: float = 1.0,
                 ce_weight: float = 0.0) -> dict[str, float]:
    """One optimiser step of ``sum_k w_k D(P_k || Q) + ce_weight (-log Q(y_t))``
    (docs/distillation.md; the second term the batch's own tokens, as SFT) at the loss-mask
    positions, ``token_mean`` over the step. ``teacher(micro_batch)`` gives, per teacher, the
    positions it scores (indices into the micro-batch's loss-mask positions after the first
    token, row-major), their weights ``w_k`` and its ``[n, V]`` log-probabilities, computed
    without gradient."""
    fn = get("divergence", divergence)

    def micro(mb: Batch, norm: StepNorm):
        student = token_distributions(trainer.model, mb.input_ids, mb.attention_mask,
                                      mb.loss_mask, temperature)
        per_token = student.new_zeros(student.shape[0])
        for index, weight, teacher_logp in teacher(mb):
            index, weight, teacher_logp = (t.to(student.device)
                                           for t in (index, weight, teacher_logp))
            value = fn(teacher_logp=teacher_logp, student_logp=student[index], **options)
            per_token = per_token.index_add(0, index, weight.to(value.dtype) * value)
        scale = 1.0 / max(norm.num_tokens, 1.0)
        stats = {"divergence": per_token.detach().sum() * scale}
        if ce_weight:
            tokens = mb.input_ids[:, 1:].reshape(-1)[mb.loss_mask[:, 1:].reshape(-1).nonzero()]
            nll = -student.gather(-1, tokens.to(student.device))[:, 0]
            per_token = per_token + ce_weight * nll
            stats["ce"] = nll.detach().sum() * scale
        return per_token.sum() * scale, stats

    return trainer.optimizer_step(batch, micro)
