"""Log-prob and entropy of the sampled tokens, computed in chunks; a value model's per-token
values and a reward model's scores, aligned the same way.

The full-vocabulary fp32 logits ``[B, T, V]`` never exist at once: the decoder's hidden states
are projected to the vocabulary ``chunk_size`` token positions at a time, and each chunk runs
under activation checkpointing so its logits are recomputed (not stored) for the backward pass.
Checkpointing is skipped when the whole batch's logits are small (``CHECKPOINT_ABOVE_BYTES``):
there, keeping them costs less than recomputing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from posttrain.algos.offpolicy import keep_sampling_mask
from posttrain.models.shared_prefix import decoder_hidden_states

CHECKPOINT_ABOVE_BYTES = 256 * 2**20


def output_logits(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """fp32 logits of ``hidden`` as the model's own forward makes them: its output head, then
    Cohere's ``logit_scale`` and Gemma 2/3's final soft-capping ``c tanh(z / c)`` where its
    config has them."""
    config = model.config.get_text_config()
    logits = model.get_output_embeddings()(hidden).float()
    if scale := getattr(config, "logit_scale", None):
        logits = logits * scale
    if cap := getattr(config, "final_logit_softcapping", None):
        logits = torch.tanh(logits / cap) * cap
    return logits


def _token_stats(
    hidden: torch.Tensor, targets: torch.Tensor, model: torch.nn.Module, temperature: float,
    top_k: int = 0, top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = output_logits(model, hidden)
    if targets.dim() == 2:  # K scored tokens a position: log-probs only
        return (torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets),
                logits.new_zeros(len(logits)))
    if top_k or top_p < 1.0:
        logp_all = keep_sampling_mask(logits=logits, temperature=temperature, top_k=top_k,
                                      top_p=top_p, keep=targets)
        logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return logp, -torch.where(logp_all.isfinite(), logp_all.exp() * logp_all, 0.0).sum(-1)
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    return logp, logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def sequence_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
    temperature: float = 1.0, chunk_size: int = 1024, with_entropy: bool = True,
    prefix_lens: torch.Tensor | None = None, checkpoint_chunks: bool | None = None,
    score_mask: torch.Tensor | None = None, top_k: int = 0, top_p: float = 1.0,
    targets: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logp[b, t] = log softmax(z_{t-1} / temperature)[y[b, t]]`` and its entropy, where
    ``y`` is ``targets`` (``[B, T]``, aligned with ``input_ids``) or, by default, ``input_ids``
    itself (teacher forcing); targets ``[B, T, K]`` score K tokens a position (``logp``
    ``[B, T, K]``; no entropy, no truncated support);
    with ``top_k``/``top_p`` over the engine's truncated support with the scored token kept
    (``keep_sampling_mask``), as the engine sampled.

    Returns ``[B, T]`` tensors aligned with ``input_ids`` for right-padded rows. Only tokens
    where ``score_mask`` (default: ``attention_mask``) is set are scored, the rest hold 0 (as
    does position 0): a trainer passes its loss mask, so prompt tokens never reach the
    vocabulary projection. With ``prefix_lens``, rows sharing their first ``prefix_lens[b]``
    tokens encode them once (``shared_prefix``). ``checkpoint_chunks``: ``None`` decides by
    logits size. Works for any HF causal LM that exposes ``get_decoder()`` and
    ``get_output_embeddings()``.
    """
    if temperature <= 0:
        raise ValueError("log-probs need temperature > 0")
    head = model.get_output_embeddings()
    hidden = decoder_hidden_states(model.get_decoder(), input_ids, attention_mask, prefix_lens)
    b, t, h = hidden.shape
    wanted = attention_mask if score_mask is None else score_mask
    index = wanted[:, 1:].reshape(-1).nonzero().squeeze(-1)
    flat_h = hidden[:, :-1].reshape(-1, h).index_select(0, index)
    scored = input_ids if targets is None else targets
    if scored.dim() == 3 and (top_k or top_p < 1.0 or with_entropy):
        raise ValueError("K targets a position: log-probs only, over the whole vocabulary")
    flat_y = scored[:, 1:].reshape(b * (t - 1), *scored.shape[2:]).index_select(0, index)
    n = len(index)
    if checkpoint_chunks is None:
        checkpoint_chunks = n * head.weight.shape[0] * 4 > CHECKPOINT_ABOVE_BYTES
    stats = (partial(checkpoint, _token_stats, use_reentrant=False)
             if checkpoint_chunks and torch.is_grad_enabled() else _token_stats)
    chunks = [stats(flat_h[s : s + chunk_size], flat_y[s : s + chunk_size], model, temperature,
                    top_k, top_p)
              for s in range(0, n, chunk_size) or [0]]  # an empty selection still yields a graph
    logps, ents = zip(*chunks)

    def place(values: tuple[torch.Tensor, ...]) -> torch.Tensor:
        values = torch.cat(values)
        flat = hidden.new_zeros((b * (t - 1), *values.shape[1:]), dtype=torch.float32)
        flat = flat.index_copy(0, index, values).view(b, t - 1, *values.shape[1:])
        return torch.cat([flat.new_zeros((b, 1, *values.shape[1:])), flat], dim=1)

    return place(logps), place(ents) if with_entropy else None


def naive_sequence_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference implementation that materialises ``[B, T, V]`` logits (tests, benchmarks)."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids).logits.float()[:, :-1] / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    pad = logits.new_zeros((input_ids.shape[0], 1))
    return torch.cat([pad, logp], 1), torch.cat([pad, entropy], 1)


def token_distributions(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
    mask: torch.Tensor, temperature: float = 1.0,
) -> torch.Tensor:
    """``[N, V]`` log-probabilities of the next-token distribution before every position where
    ``mask`` is set (row-major order), at ``temperature``: what distillation compares. Only the
    masked positions reach the vocabulary projection."""
    hidden = decoder_hidden_states(model.get_decoder(), input_ids, attention_mask)
    index = mask[:, 1:].reshape(-1).nonzero().squeeze(-1)
    flat = hidden[:, :-1].reshape(-1, hidden.shape[-1]).index_select(0, index)
    return torch.log_softmax(output_logits(model, flat) / temperature, dim=-1)


def next_token_logits(model: torch.nn.Module, input_ids: torch.Tensor,
                      chunk_size: int = 1024, start: int = 0) -> Iterator[torch.Tensor]:
    """fp32 logits ``[c, V]`` after each proper prefix of the sequence ``input_ids`` from
    the ``start``-th on (row ``t``: after ``input_ids[: t + 1]``), ``chunk_size`` positions
    at a time: the rows before ``start`` never reach the vocabulary projection."""
    ids = input_ids.view(1, -1)
    hidden = decoder_hidden_states(model.get_decoder(), ids, torch.ones_like(ids))[0, :-1]
    for s in range(start, len(hidden), chunk_size) or [start]:  # none: one empty chunk
        yield output_logits(model, hidden[s : s + chunk_size])


def top_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, k: int,
                 chunk_size: int = 1024, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, logp)``, each ``[T - 1 - start, k]``: the ``k`` likeliest next tokens
    after every proper prefix of the sequence ``input_ids`` (``next_token_logits``' rows from
    ``start``), likeliest first, and their log-probs at temperature 1."""
    k = min(k, model.get_output_embeddings().weight.shape[0])
    tops = [torch.log_softmax(logits, dim=-1).topk(k)
            for logits in next_token_logits(model, input_ids, chunk_size, start)]
    return torch.cat([t.indices for t in tops]), torch.cat([t.values for t in tops])


class Scorer(torch.nn.Module):
    """``sequence_logprobs(model, ...)`` as this module's forward."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **options):
        return sequence_logprobs(self.model, input_ids, attention_mask, **options)


def sequence_values(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
                    ) -> torch.Tensor:
    """``V[b, t]`` = the value head on the hidden state before token ``t`` (the state in which
    token ``t`` was chosen); ``[B, T]``, position 0 holds 0."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    head = out.logits[..., 0].float()
    return torch.cat([head.new_zeros((head.shape[0], 1)), head[:, :-1]], dim=1)


def sequence_scores(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
                    ) -> torch.Tensor:
    """``[B]``: a reward model's scalar head on the last valid token of each right-padded
    row."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    last = attention_mask.sum(dim=1) - 1
    return out.logits[torch.arange(len(last), device=last.device), last, 0].float()
