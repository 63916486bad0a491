"""Incremental decoders: the KV-cached forward passes ``TorchEngine`` samples from.

A decoder holds a batch of left-padded prompts and their cache. ``prefill`` encodes the prompts
and returns next-token logits; ``select(rows)`` keeps (or repeats) rows of the batch, so
identical prompts are encoded once and finished rows stop costing work; ``step(tokens)``
appends one token a row and returns the next logits.

``HFDecoder`` runs any Hugging Face causal LM through its own forward. ``LlamaDecoder`` computes
the same function for Llama-family models without the HF forward's per-step overhead (mask
construction, cache bookkeeping, ~50 small ops a layer): fused q/k/v and gate/up projections,
one additive mask a step, a preallocated cache. Its logits equal the HF forward's
(tests/integration/test_engine.py).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel
from transformers.models.llama.modeling_llama import rotate_half

from posttrain.models.compat import cache_argument


class Decoder(Protocol):
    def prefill(self, ids: torch.Tensor, valid: torch.Tensor, max_new: int) -> torch.Tensor: ...

    def select(self, rows: torch.Tensor) -> None: ...

    def step(self, tokens: torch.Tensor) -> torch.Tensor: ...


class HFDecoder:
    """Any HF causal LM, through its own forward and a ``DynamicCache`` (whose rows can be
    selected, unlike a ``StaticCache``'s)."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model

    def prefill(self, ids: torch.Tensor, valid: torch.Tensor, max_new: int) -> torch.Tensor:
        self.cache = DynamicCache(config=self.model.config)
        self.attn = valid.long()
        self.pos = (self.attn.cumsum(-1) - 1).clamp(min=0)
        return self._forward(ids, self.pos)

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.attn, self.pos = self.attn[rows], self.pos[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.attn = torch.cat([self.attn, self.attn.new_ones((len(tokens), 1))], dim=1)
        self.pos = self.pos[:, -1:] + 1
        return self._forward(tokens[:, None], self.pos)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=self.attn, position_ids=pos,
                          **cache_argument(self.model, self.cache), use_cache=True,
                          logits_to_keep=1).logits[:, -1]


def _fuse(*linears: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the linears' weights (and biases) into one tensor and make each linear's
    parameters views of it: one matmul computes all of them, and in-place weight updates
    through the linears reach the fused tensor. Returns ``(weight, bias)``."""
    fused = []
    for attr in ("weight", "bias"):
        parts = [getattr(lin, attr) for lin in linears]
        if any(p is None for p in parts):
            fused.append(None)
            continue
        whole = torch.cat([p.detach() for p in parts])
        for lin, view in zip(linears, whole.split([p.shape[0] for p in parts])):
            setattr(lin, attr, torch.nn.Parameter(view, requires_grad=False))
        fused.append(whole)
    return fused[0], fused[1]


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """An HF ``RMSNorm`` module's function as one fused op."""
    return F.rms_norm(x, x.shape[-1:], norm.weight, norm.variance_epsilon)


class LlamaDecoder:
    """Lean decoding for ``llama``, ``qwen2`` and ``qwen3`` (q/k normalised per head) models
    without sliding windows. Others decode through ``HFDecoder``: Qwen3-MoE's routed experts,
    Gemma's scaled embeddings, (1 + w) norms, GELU and sliding-window layers are not here.

    Mutates ``model`` once: its q/k/v and gate/up weights become views of fused tensors (values
    unchanged), so ``named_parameters`` and in-place updates keep working.
    """

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        cfg = model.config
        return (cfg.model_type in ("llama", "qwen2", "qwen3")
                and not getattr(cfg, "use_sliding_window", False) and cfg.hidden_act == "silu"
                and getattr(cfg, "pretraining_tp", 1) == 1)

    def __init__(self, model: PreTrainedModel) -> None:
        cfg = model.config
        if not self.supports(model):
            raise ValueError(f"LlamaDecoder does not support model_type {cfg.model_type!r}")
        self.base = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.qk_norm = cfg.model_type == "qwen3"
        self.layers = [(layer, _fuse(layer.self_attn.q_proj, layer.self_attn.k_proj,
                                     layer.self_attn.v_proj),
                        _fuse(layer.mlp.gate_proj, layer.mlp.up_proj))
                       for layer in self.base.layers]

    def prefill(self, ids: torch.Tensor, valid: torch.Tensor, max_new: int) -> torch.Tensor:
        b, s = ids.shape
        shape = (len(self.layers), b, self.n_kv, s + max_new, self.head_dim)
        on = {"dtype": self.head.weight.dtype, "device": self.head.weight.device}
        self.k, self.v = torch.zeros(shape, **on), torch.zeros(shape, **on)
        self.valid = torch.cat([valid, valid.new_ones((b, max_new))], dim=1)
        self.pos = (valid.long().cumsum(-1) - 1).clamp(min=0)
        self.length = 0
        # rotary cos/sin for every position this batch can reach, looked up per step
        positions = torch.arange(s + max_new, device=ids.device)[None]
        self.cos, self.sin = (t[0] for t in self.base.rotary_emb(self.head.weight, positions))
        # a query sees earlier valid slots; padding queries see themselves (finite, unused)
        causal = torch.ones((s, s), dtype=torch.bool, device=ids.device).tril()
        keep = causal[None] & (valid[:, None, :]
                               | torch.eye(s, dtype=torch.bool, device=ids.device)[None])
        return self._forward(ids, self.pos, keep[:, None])

    def select(self, rows: torch.Tensor) -> None:
        self.k, self.v = self.k[:, rows], self.v[:, rows]
        self.valid, self.pos = self.valid[rows], self.pos[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.pos = self.pos[:, -1:] + 1
        keep = self.valid[:, None, None, : self.length + 1]
        return self._forward(tokens[:, None], self.pos, keep)

    def extend(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``tokens [B, S]`` (each row's next ``S``, causal among themselves) and
        return every one's logits ``[B, S, V]`` and final hidden state (after the last norm)
        ``[B, S, d]``: speculative decoding's verification. ``commit`` then keeps a prefix."""
        b, s = tokens.shape
        self.pos = self.pos[:, -1:] + torch.arange(1, s + 1, device=tokens.device)
        end = self.length + s
        keep = self.valid[:, None, None, :end].expand(b, 1, s, end).clone()
        keep[..., self.length :] &= torch.ones((s, s), dtype=torch.bool,
                                               device=tokens.device).tril()
        states = _rms_norm(self.base.norm, self._forward(tokens, self.pos, keep, last=False))
        return self.head(states), states

    def park(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """A copy of ``rows``' cache as it stands (slots ``0 .. length``, their validity and
        each row's last position), for ``restore`` to continue later."""
        return {"k": self.k[:, rows, :, : self.length], "v": self.v[:, rows, :, : self.length],
                "valid": self.valid[rows, : self.length], "pos": self.pos[rows, -1:]}

    def restore(self, parked: list[dict[str, torch.Tensor]], more: int) -> None:
        """A batch of the ``parked`` rows (in order), each able to take ``more`` tokens: their
        caches side by side, the shorter ones padded with slots nobody attends to."""
        length = max(p["valid"].shape[1] for p in parked)

        def padded(t: torch.Tensor, dim: int, fill) -> torch.Tensor:
            shape = list(t.shape)
            shape[dim] = length + more - t.shape[dim]
            return torch.cat([t, t.new_full(shape, fill)], dim=dim)

        self.k = torch.cat([padded(p["k"], 3, 0) for p in parked], dim=1)
        self.v = torch.cat([padded(p["v"], 3, 0) for p in parked], dim=1)
        self.valid = torch.cat([torch.cat([p["valid"], p["valid"].new_zeros(
            (len(p["valid"]), length - p["valid"].shape[1])), p["valid"].new_ones(
            (len(p["valid"]), more))], dim=1) for p in parked])
        self.pos = torch.cat([p["pos"] for p in parked])
        self.length = length
        positions = torch.arange(int(self.pos.max()) + more + 1, device=self.pos.device)[None]
        self.cos, self.sin = (t[0] for t in self.base.rotary_emb(self.head.weight, positions))

    def commit(self, kept: torch.Tensor) -> None:
        """After ``extend`` of ``S`` tokens, keep the first ``kept[b] + 1`` of row ``b``'s:
        the others' cache slots are never attended to again, and the row continues after
        its last kept token."""
        s = self.pos.shape[1]
        slots = torch.arange(s, device=kept.device)[None]
        self.valid[:, self.length - s : self.length] &= slots <= kept[:, None]
        self.pos = self.pos.gather(1, kept[:, None])

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor,
                 last: bool = True) -> torch.Tensor:
        """Run ``ids [B, S]`` at cache slots ``length .. length+S``; ``keep [B, 1, S, K]`` says
        which of the ``K = length+S`` slots each query may attend to. Returns the last
        position's logits, and keeps its final hidden state in ``last_hidden``; with
        ``last=False``, every position's residual stream before the final norm."""
        b, s = ids.shape
        start, end = self.length, self.length + s
        n_h, n_kv, d = self.n_heads, self.n_kv, self.head_dim
        group = n_h // n_kv
        x = self.base.embed_tokens(ids)
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]
        # grouped-query attention runs as one matrix a (row, kv head): its rows are
        # (query head in group, position), so the mask repeats over the group
        mask = torch.zeros(keep.shape, dtype=x.dtype, device=x.device).masked_fill_(
            ~keep, float("-inf"))
        mask = mask.repeat(1, n_kv, group, 1).view(b * n_kv, group * s, end)
        for i, (layer, (w_qkv, b_qkv), (w_gu, b_gu)) in enumerate(self.layers):
            attn = layer.self_attn
            qkv = F.linear(_rms_norm(layer.input_layernorm, x), w_qkv, b_qkv)
            qk = qkv[..., : (n_h + n_kv) * d].view(b, s, n_h + n_kv, d).transpose(1, 2)
            if self.qk_norm:  # each head's q and k normalised before rotary (Qwen3)
                qk = torch.cat([_rms_norm(attn.q_norm, qk[:, :n_h]),
                                _rms_norm(attn.k_norm, qk[:, n_h:])], dim=1)
            qk = qk * cos + rotate_half(qk) * sin  # rotary on q and k heads at once
            self.k[i, :, :, start:end] = qk[:, n_h:]
            v = qkv[..., (n_h + n_kv) * d :].view(b, s, n_kv, d)
            self.v[i, :, :, start:end] = v.transpose(1, 2)
            q = qk[:, :n_h].reshape(b * n_kv, group * s, d)
            keys = self.k[i, :, :, :end].flatten(0, 1)
            scores = torch.baddbmm(mask, q, keys.transpose(1, 2), alpha=attn.scaling)
            out = torch.bmm(torch.softmax(scores, dim=-1), self.v[i, :, :, :end].flatten(0, 1))
            out = out.view(b, n_h, s, d).transpose(1, 2).reshape(b, s, n_h * d)
            x = x + attn.o_proj(out)
            h = _rms_norm(layer.post_attention_layernorm, x)
            gate, up = F.linear(h, w_gu, b_gu).chunk(2, dim=-1)
            x = x + layer.mlp.down_proj(F.silu(gate) * up)
        self.length = end
        if not last:
            return x
        self.last_hidden = _rms_norm(self.base.norm, x[:, -1])
        return self.head(self.last_hidden)


def drop_finished(decoder: Decoder, hit: torch.Tensor, *rows: torch.Tensor
                  ) -> tuple[torch.Tensor, ...] | None:
    """Keep the decoder's rows that ``hit`` does not mark and the same entries of each of
    ``rows``; None when no row is left."""
    keep = (~hit).nonzero().squeeze(-1)
    if len(keep) == 0:
        return None
    decoder.select(keep)
    return tuple(r[keep] for r in rows)
