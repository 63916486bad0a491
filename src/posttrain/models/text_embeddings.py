"""Text embeddings read from a language model's final hidden states (the inputs of P-GenRM's
prototype module, ``models.preference_prototypes``)."""

from __future__ import annotations

import torch


@torch.no_grad()
def pooled_states(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt [B, d], reply [B, d])``: the mean of each right-padded row's final hidden
    states (after the model's last norm) over its prompt (the tokens before its first
    ``loss_mask`` token, which no reply can change) and over its reply tokens
    (``loss_mask``), in float32. A row without a prompt or reply token raises
    ``ValueError``."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    states = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   output_hidden_states=True).hidden_states[-1].float()
    reply = loss_mask.bool() & attention_mask.bool()
    prompt = attention_mask.bool() & (reply.cumsum(dim=1) == 0)
    means = []
    for mask, what in ((prompt, "prompt"), (reply, "reply")):
        count = mask.sum(dim=1, keepdim=True)
        if bool((count == 0).any()):
            raise ValueError(f"pooled_states: a row has no {what} token to pool")
        means.append((states * mask[..., None]).sum(dim=1) / count)
    return means[0], means[1]
