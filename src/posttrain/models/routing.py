"""Mixture-of-experts routing: the experts each token went to, recorded where a model runs
(the engine) and replayed where it is scored again (the trainer): the catalogue's
``routing_replay`` (R3). Without it a token the engine sent to experts (a, b) may go to
(a, c) in the trainer, where a rounding difference tipped a near tie, and its log-prob changes
by far more than the rounding.

Works for Hugging Face MoE models whose router is a ``*TopKRouter`` module returning
``(router_logits, gates, experts)`` (Qwen3-MoE, Qwen2-MoE, Mixtral in transformers 5). The
routers' logits also give the load-balancing auxiliary loss (``load_balancing_loss``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from posttrain.algos.offpolicy import routing_replay


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's MoE routers in layer order (empty for a dense model)."""
    return [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]


class RoutingRecord:
    """The experts every router call of a ``capture`` chose (``[N, k]`` each, in call order);
    ``take`` hands over one forward pass's."""

    def __init__(self, n_routers: int) -> None:
        self.n = n_routers
        self.flat: list[torch.Tensor] = []

    def take(self) -> torch.Tensor:
        """``[N, L, k]``: the experts of the ``N`` tokens of the forward passes recorded since
        the last ``take`` (one pass: the L routers' calls)."""
        layers, self.flat = self.flat[-self.n:], []
        return torch.stack(layers, dim=1)


@contextlib.contextmanager
def _hooked(model: torch.nn.Module, hook_for: Callable[[int], Callable], what: str
            ) -> Iterator[None]:
    """``hook_for(i)`` as a forward hook on router ``i`` of ``model`` while the context is
    open; a model without routers is a ``ValueError`` saying ``what`` needs them."""
    found = routers(model)
    if not found:
        raise ValueError(f"{what} needs a mixture-of-experts model; this one has no router")
    hooks = [r.register_forward_hook(hook_for(i)) for i, r in enumerate(found)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def capture(model: torch.nn.Module) -> Iterator[RoutingRecord]:
    """Record the experts every router of ``model`` picks while the context is open."""
    record = RoutingRecord(len(routers(model)))
    with _hooked(model, lambda _i: lambda _m, _a, out: record.flat.append(out[2].detach()),
                 "recording routing"):
        yield record


@contextlib.contextmanager
def replay(model: torch.nn.Module, experts: torch.Tensor) -> Iterator[None]:
    """Force the routers of one forward pass over ``[B, T]`` tokens to ``experts [B, T, L,
    k]`` (-1: the router's own choice, for positions never routed in the engine): gates are
    the router's softmax over the forced experts (``routing_replay``; renormalised as the
    router's ``norm_topk_prob`` says), so the router keeps its gradient."""
    n = len(routers(model))
    if n and experts.shape[2] != n:
        raise ValueError(f"recorded routing has {experts.shape[2]} layers, the model {n} "
                         "routers")

    def hook_for(layer: int):
        def hook(module, _args, out):
            logits, gates, chosen = out
            forced = experts[:, :, layer].reshape(-1, experts.shape[-1]).to(chosen.device)
            own = (forced < 0).any(dim=-1, keepdim=True)
            forced = torch.where(own, chosen, forced)
            if getattr(module, "norm_topk_prob", True):
                new = routing_replay(router_logits=logits.float(), forced_experts=forced)
            else:
                new = torch.softmax(logits.float(), dim=-1).gather(-1, forced)
            return logits, new.to(gates.dtype), forced
        return hook

    with _hooked(model, hook_for, "routing replay"):
        yield


@contextlib.contextmanager
def router_logits(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """The logits ``[N, E]`` of every router call while the context is open, in call order,
    with their gradient."""
    logits: list[torch.Tensor] = []
    with _hooked(model, lambda _i: lambda _m, _a, out: logits.append(out[0]), "a router loss"):
        yield logits


def load_balancing_loss(model: torch.nn.Module, logits: list[torch.Tensor],
                        attention_mask: torch.Tensor) -> torch.Tensor:
    """The Switch Transformer auxiliary loss ``E sum_e f_e P_e`` (``f_e``: the share of top-k
    assignments to expert ``e``, ``P_e``: its mean router probability) over the tokens
    ``attention_mask`` keeps, through transformers' own ``load_balancing_loss_func``."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    router = routers(model)[0]
    return load_balancing_loss_func(tuple(logits), router.num_experts, router.top_k,
                                    (attention_mask > 0).long())
