"""Decoder hidden states with shared prompt prefixes encoded once.

A GRPO batch holds ``G`` completions of each prompt. Rows whose first ``prefix_lens[b]`` tokens
are identical run that prefix through the decoder once; its key/value cache is then indexed out
to every row of the group (``DynamicCache.batch_select_indices``, differentiable) and only the
suffixes run per row. Gradients from all rows of a group accumulate in the shared prefix, so
values and gradients equal the plain forward's (tests/integration/test_models.py); the work
saved is ``(G - 1) / G`` of the prompt tokens.
"""

from __future__ import annotations

import torch

from posttrain.models.compat import cache_argument, output_cache


def prefix_lengths(loss_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Leading untrained tokens a row (its prompt), clamped to ``[1, length - 1]``."""
    lengths = attention_mask.sum(dim=1)
    trained = loss_mask > 0
    first = torch.where(trained.any(dim=1), trained.float().argmax(dim=1), lengths)
    return torch.minimum(first.clamp(min=1), (lengths - 1).clamp(min=1))


def packed_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions restarting at 0 for every sample of a packed row (``attention_mask`` numbers
    the samples 1, 2, ...; padding restarts too)."""
    t = attention_mask.shape[1]
    steps = torch.arange(t, device=attention_mask.device).expand_as(attention_mask)
    starts = torch.ones_like(attention_mask, dtype=torch.bool)
    starts[:, 1:] = attention_mask[:, 1:] != attention_mask[:, :-1]
    start_index = torch.where(starts, steps, 0).cummax(dim=1).values
    return steps - start_index


def _plain(decoder, input_ids, attention_mask) -> torch.Tensor:
    if bool((attention_mask > 1).any()):  # packed: HF isolates samples by their positions
        return decoder(input_ids=input_ids, attention_mask=None,
                       position_ids=packed_positions(attention_mask)).last_hidden_state
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return decoder(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids).last_hidden_state


def _group_rows(input_ids: torch.Tensor, prefix_lens: torch.Tensor) -> tuple[list[int], list[int]]:
    """``(first row of each distinct prefix, prefix index of each row)``."""
    index: dict[tuple[int, ...], int] = {}
    leaders, group = [], []
    for b, p in enumerate(prefix_lens.tolist()):
        key = tuple(input_ids[b, :p].tolist())
        if key not in index:
            index[key] = len(leaders)
            leaders.append(b)
        group.append(index[key])
    return leaders, group


def decoder_hidden_states(
    decoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
    prefix_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Last hidden states ``[B, T, H]`` of right-padded rows (the plain forward's values).

    With ``prefix_lens``, identical prefixes are encoded once; when no two rows share one, or
    the rows are packed (``Batch.packed``), the plain forward runs.
    """
    lengths = attention_mask.sum(dim=1)
    if prefix_lens is None or bool((lengths < 2).any()) or bool((attention_mask > 1).any()):
        return _plain(decoder, input_ids, attention_mask)
    leaders, group_list = _group_rows(input_ids, prefix_lens)
    if len(leaders) == len(group_list):
        return _plain(decoder, input_ids, attention_mask)
    b, t = input_ids.shape
    group = torch.tensor(group_list, device=input_ids.device)
    lead_len = prefix_lens[leaders]
    p_max = int(lead_len.max())
    steps = torch.arange(p_max, device=input_ids.device)
    prefix_attn = (steps[None, :] < lead_len[:, None]).long()
    prefix_ids = torch.where(prefix_attn.bool(), input_ids[leaders, :p_max], 0)
    out = decoder(input_ids=prefix_ids, attention_mask=prefix_attn,
                  position_ids=steps.expand_as(prefix_ids), use_cache=True)
    cache = output_cache(out)
    cache.batch_select_indices(group)
    # suffix of row r: tokens prefix_lens[r] .. lengths[r] - 1, right-padded to s_max
    suffix_len = lengths - prefix_lens
    s_max = int(suffix_len.max())
    offs = torch.arange(s_max, device=input_ids.device)
    suffix_attn = (offs[None, :] < suffix_len[:, None]).long()
    src = (prefix_lens[:, None] + offs[None, :]).clamp(max=t - 1)
    suffix_ids = torch.where(suffix_attn.bool(), input_ids.gather(1, src), 0)
    suffix_hidden = decoder(
        input_ids=suffix_ids, attention_mask=torch.cat([prefix_attn[group], suffix_attn], dim=1),
        position_ids=prefix_lens[:, None] + offs[None, :], **cache_argument(decoder, cache),
    ).last_hidden_state
    # reassemble: position j < p from the group's prefix, else suffix position j - p
    both = torch.cat([out.last_hidden_state.index_select(0, group), suffix_hidden], dim=1)
    pos = torch.arange(t, device=input_ids.device)[None, :].expand(b, t)
    take = torch.where(pos < prefix_lens[:, None], pos, p_max + pos - prefix_lens[:, None])
    take = take.clamp(max=p_max + s_max - 1)
    return both.gather(1, take[:, :, None].expand(b, t, both.shape[-1]))
