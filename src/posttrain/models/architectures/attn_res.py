"""Attention Residuals (Kimi Team 2026, arXiv 2603.15031): a Llama whose layers read an
attention over depth instead of the residual sum.

Layer ``l``'s input is ``h_l = sum_i alpha_i->l v_i`` over the sources before it, with
``alpha_i->l = softmax_i(w_l . RMSNorm(v_i))`` and ``w_l`` a learned vector, zero at the start
(a uniform mean). The sources are ``v_0`` (the token embedding, ``h_1``) and each earlier
layer's update ``f_i(h_i) = layer_i(h_i) - h_i``: ``full``. The ``block`` variant groups the
layers in blocks of ``attn_res_block``; layer ``i`` of block ``n`` reads ``v_0``, the sums of
the finished blocks ``b_1 .. b_n-1`` and the partial sum of its own block before it (when
there is one), so a block of one layer is ``full``. The final norm reads ``h_L+1``, the same
attention with its own ``w``.

Depth attention works per token, so a KV cache needs nothing new; ``TorchEngine`` decodes the
model through its own forward (``HFDecoder``). The layers run unchanged, wrapped by hooks:
a pre-hook replaces each layer's input (the first layer's starts the forward's sources), a
hook takes its update. Loading a saved directory
with ``from_pretrained`` needs ``posttrain.models`` imported first (the registration)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

VARIANTS = ("full", "block")


class AttnResConfig(LlamaConfig):
    """A ``LlamaConfig`` with ``attn_res`` (``full`` or ``block``) and ``attn_res_block``
    (layers a block)."""

    model_type = "posttrain_attn_res"

    def __init__(self, attn_res: str = "full", attn_res_block: int = 2, **kwargs) -> None:
        if attn_res not in VARIANTS or attn_res_block < 1:
            raise ValueError(f"attn_res: one of {VARIANTS} with attn_res_block >= 1, not "
                             f"{attn_res!r}, {attn_res_block}")
        self.attn_res, self.attn_res_block = attn_res, attn_res_block
        super().__init__(**kwargs)


class DepthSources:
    """The sources a layer attends over, as one forward builds them (module docstring)."""

    def __init__(self, embeddings: torch.Tensor, block: int | None) -> None:
        self.done = [embeddings]  # v_0, then each update (full) or each finished block's sum
        self.partial: torch.Tensor | None = None
        self.block, self.in_block = block, 0

    def add(self, update: torch.Tensor) -> None:
        if self.block is None:
            self.done.append(update)
            return
        self.partial = update if self.partial is None else self.partial + update
        self.in_block += 1
        if self.in_block == self.block:
            self.done.append(self.partial)
            self.partial, self.in_block = None, 0

    def read(self, query: torch.Tensor, eps: float) -> torch.Tensor:
        """``sum_i softmax_i(w . RMSNorm(v_i)) v_i`` for ``w`` = ``query [d]``."""
        values = torch.stack(self.done + ([self.partial] if self.partial is not None else []))
        keys = F.rms_norm(values, values.shape[-1:], eps=eps)
        alpha = torch.softmax((keys * query).sum(dim=-1), dim=0)
        return (alpha[..., None] * values).sum(dim=0)


class AttnResForCausalLM(LlamaForCausalLM):
    """``LlamaForCausalLM`` with ``depth_queries [L + 1, d]`` (``w_l`` for layer ``l``'s
    input, row 0 unused, and row ``L`` for the final norm's) and the hooks."""

    config_class = AttnResConfig

    def __init__(self, config: AttnResConfig) -> None:
        super().__init__(config)
        self.depth_queries = nn.Parameter(torch.zeros(config.num_hidden_layers + 1,
                                                      config.hidden_size))
        self._sources: DepthSources | None = None  # one forward's, started by the first layer
        self._inputs: dict[int, torch.Tensor] = {}
        base = self.model
        for i, layer in enumerate(base.layers):  # partials of bound methods: a deep copy of
            # the model (an engine's) rebinds them to the copy, where closures would not
            layer.register_forward_pre_hook(partial(self._read, i), with_kwargs=True)
            layer.register_forward_hook(partial(self._write, i))
        base.norm.register_forward_pre_hook(self._final)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self and hasattr(self, "depth_queries"):
            nn.init.zeros_(self.depth_queries)

    def _read(self, i: int, module, args, kwargs):
        if i == 0:  # v_0 = h_1: the embedding as the first layer gets it (LoRA'd or given)
            block = None if self.config.attn_res == "full" else self.config.attn_res_block
            self._sources, self._inputs = DepthSources(args[0], block), {}
            h = args[0]
        else:
            h = self._sources.read(self.depth_queries[i], self.config.rms_norm_eps)
        self._inputs[i] = h
        return (h, *args[1:]), kwargs

    def _write(self, i: int, module, args, output) -> None:
        out = output[0] if isinstance(output, tuple) else output
        self._sources.add(out - self._inputs.pop(i))

    def _final(self, module, args):
        h = self._sources.read(self.depth_queries[-1], self.config.rms_norm_eps)
        self._sources = None
        return (h, *args[1:])


AutoConfig.register(AttnResConfig.model_type, AttnResConfig)
AutoModelForCausalLM.register(AttnResConfig, AttnResForCausalLM)
