"""A multi-token-prediction head for a causal LM that has none
(``mtp_self_distill``; DeepSeek-V3's MTP module, one block deep).

From the main model's final hidden state ``h_t`` (after its last norm) and the embedding of
token ``t + 1``: ``s = W [RMSNorm(h_t); RMSNorm(e(x_t+1))]``, then ``s += MLP(RMSNorm(s))``
(SwiGLU), and token ``t + 2``'s logits are the main model's output head on ``RMSNorm(s)``.
The embedding and the output head are the main model's, shared and never trained here. ``s``
stands in for the next hidden state, so the head chains: it drafts several tokens for
speculative decoding (``engines.speculative``).

The head is saved beside the model as ``mtp_head.safetensors`` and ``mtp_head.json``:
``from_pretrained`` ignores both, so the directory loads as before."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from posttrain.algos import get
from posttrain.models.frozen import frozen
from posttrain.models.loading import load_beside, save_beside

WEIGHTS, SETTINGS = "mtp_head.safetensors", "mtp_head.json"


class MTPHead(nn.Module):
    """The head of size ``hidden`` with a SwiGLU of ``intermediate`` (module docstring)."""

    def __init__(self, hidden: int, intermediate: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.hidden, self.intermediate, self.eps = hidden, intermediate, eps
        self.norm_h, self.norm_e, self.norm_mlp, self.norm_out = (
            nn.Parameter(torch.ones(hidden)) for _ in range(4))
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    @classmethod
    def for_model(cls, model: nn.Module) -> MTPHead:
        """A fresh head sized to ``model`` (a Hugging Face causal LM), in its dtype and on its
        device."""
        cfg = model.config
        ref = model.get_output_embeddings().weight
        head = cls(cfg.hidden_size, getattr(cfg, "intermediate_size", 4 * cfg.hidden_size),
                   getattr(cfg, "rms_norm_eps", 1e-6))
        return head.to(dtype=ref.dtype, device=ref.device)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:], weight, self.eps)

    def forward(self, hidden: torch.Tensor, next_embeds: torch.Tensor) -> torch.Tensor:
        """The head's state ``s [..., d]`` from ``h_t`` and ``e(x_t+1)`` (each ``[..., d]``)."""
        s = self.proj(torch.cat([self._norm(hidden, self.norm_h),
                                 self._norm(next_embeds, self.norm_e)], dim=-1))
        gate, up = self.gate_up(self._norm(s, self.norm_mlp)).chunk(2, dim=-1)
        return s + self.down(F.silu(gate) * up)

    def logits(self, state: torch.Tensor, output_weight: torch.Tensor) -> torch.Tensor:
        """Token ``t + 2``'s logits: the main model's output head (its weight ``[V, d]``, no
        bias) on ``RMSNorm(s)``."""
        return F.linear(self._norm(state, self.norm_out), output_weight)

    def save(self, directory: str | Path) -> None:
        """The weights and sizes beside a saved model (``save_beside``)."""
        save_beside(directory, WEIGHTS, self.state_dict(), SETTINGS,
                    {"hidden": self.hidden, "intermediate": self.intermediate, "eps": self.eps})

    @classmethod
    def load(cls, directory: str | Path) -> MTPHead:
        """The head saved in ``directory``; ``FileNotFoundError`` names what is missing."""
        tensors, sizes = load_beside(directory, WEIGHTS, SETTINGS, "the model has no MTP head "
                                     "(train one with trainer.mtp)")
        head = cls(sizes["hidden"], sizes["intermediate"], sizes["eps"])
        head.load_state_dict(tensors)
        return head


CHUNK = 1024  # positions whose vocabulary-wide distributions exist at once


def mtp_loss(model: nn.Module, head: MTPHead, input_ids: torch.Tensor,
             attention_mask: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """``mtp_self_distill`` of ``head`` on right-padded rows: at each ``t`` whose token
    ``t + 2`` is in ``loss_mask``, ``head``'s distribution from ``h_t`` and ``e(x_t+1)``
    against ``model``'s at ``t + 1``. ``model`` runs in eval mode without gradient; only
    ``head`` learns. Logits exist only at those positions, ``CHUNK`` at a time (the token mean
    over all of them; none: 0)."""
    if input_ids.shape[1] < 3:
        raise ValueError("mtp_loss: rows need at least 3 tokens (t, t + 1 and t + 2)")
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    rows, t = (loss_mask[:, 2:].bool() & attention_mask[:, 2:].bool()).nonzero(as_tuple=True)
    output_weight = model.get_output_embeddings().weight.detach()
    with frozen(model):  # eval mode, no gradient
        states = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                     position_ids=position_ids).last_hidden_state
        next_embeds = model.get_input_embeddings()(input_ids[rows, t + 1])
    fn = get("divergence", "mtp_self_distill")
    total = torch.zeros((), dtype=torch.float32, device=input_ids.device)
    for i in range(0, len(rows), CHUNK):
        r, at = rows[i : i + CHUNK], t[i : i + CHUNK]
        with torch.no_grad():
            main_logp = torch.log_softmax(F.linear(states[r, at + 1], output_weight).float(), -1)
        state = head(states[r, at], next_embeds[i : i + CHUNK])
        mtp_logp = torch.log_softmax(head.logits(state, output_weight).float(), dim=-1)
        share = len(r) / len(rows)
        total = total + share * fn(main_logp=main_logp, mtp_logp=mtp_logp,
                                   mask=torch.ones(len(r), device=r.device))
    return total


def has_mtp_head(directory: str | Path) -> bool:
    """Whether a model directory holds an MTP head."""
    return (Path(directory) / WEIGHTS).is_file()
