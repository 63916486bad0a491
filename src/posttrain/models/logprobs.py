"""Log-prob and entropy of the sampled tokens, computed in chunks.

The full-vocabulary fp32 logits ``[B, T, V]`` never exist at once: the decoder's hidden states
are projected to the vocabulary ``chunk_size`` token positions at a time, and each chunk runs
under activation checkpointing so its logits are recomputed (not stored) for the backward pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _token_stats(
    hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    probs = torch.softmax(logits, dim=-1)
    entropy = logz - (probs * logits).sum(-1)
    return logp, entropy


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logp[b, t] = log softmax(z_{t-1} / temperature)[input_ids[b, t]]`` and its entropy.

    Returns ``[B, T]`` tensors aligned with ``input_ids`` (position 0 holds 0). Works for any
    HF causal LM that exposes ``get_decoder()`` and ``get_output_embeddings()``.
    """
    if temperature <= 0:
        raise ValueError("log-probs need temperature > 0")
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = decoder(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).last_hidden_state
    b, t, h = hidden.shape
    flat_h = hidden[:, :-1].reshape(-1, h)
    flat_y = input_ids[:, 1:].reshape(-1)
    logps, ents = [], []
    use_ckpt = torch.is_grad_enabled()
    for s in range(0, flat_h.shape[0], chunk_size):
        hc, yc = flat_h[s : s + chunk_size], flat_y[s : s + chunk_size]
        if use_ckpt:
            lp, ent = checkpoint(_token_stats, hc, yc, head, temperature, use_reentrant=False)
        else:
            lp, ent = _token_stats(hc, yc, head, temperature)
        logps.append(lp)
        ents.append(ent)
    pad = hidden.new_zeros((b, 1), dtype=torch.float32)
    logp = torch.cat([pad, torch.cat(logps).view(b, t - 1)], dim=1)
    entropy = torch.cat([pad, torch.cat(ents).view(b, t - 1)], dim=1) if with_entropy else None
    return logp, entropy


def naive_sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference implementation that materialises ``[B, T, V]`` logits (tests, benchmarks)."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits.float()
    logits = logits[:, :-1] / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    pad = logits.new_zeros((input_ids.shape[0], 1))
    return torch.cat([pad, logp], 1), torch.cat([pad, entropy], 1)
