"""Per-token values of a value model, aligned like log-probs."""

from __future__ import annotations

import torch


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
    return out.logits[torch.arange(len(last)), last, 0].float()
