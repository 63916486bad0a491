"""LoRA through ``peft``: low-rank adapters ``W + (alpha / r) B A`` on the chosen linear layers,
the base weights frozen. What leaves the trainer is merged — the weights an engine receives and
the model a stage saves are plain ``from_pretrained`` models, with the adapter folded in —
except for an engine that serves adapters itself (vLLM's LoRA requests), which gets the adapter
alone as PEFT saves it (``adapter_export``)."""

from __future__ import annotations

import copy
import json
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch


def add_lora(model: torch.nn.Module, r: int, alpha: float, dropout: float,
             target_modules: tuple[str, ...]) -> torch.nn.Module:
    """``model`` wrapped with fresh adapters (``B = 0``: the same function at the start).
    peft reads the model's ``is_gradient_checkpointing``, which transformers 5 deprecated: its
    FutureWarning on every LoRA run is silenced here, and only it."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                     target_modules=list(target_modules), bias="none")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated",
                                FutureWarning)
        return get_peft_model(model, cfg)


def is_lora(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def base_name(name: str) -> str:
    """A parameter's name in the plain model: peft's prefixes and ``base_layer`` removed."""
    return name.removeprefix("base_model.model.").replace(".base_layer.", ".")


def merged_weights(model: torch.nn.Module, adapters: Sequence[str] | None = None
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the plain model's parameters with ``adapters`` (default: the
    active ones; ``()``: none, the base weights) merged in (``W + delta``), without touching
    ``model``. A layer merges those of them it has."""
    from peft.tuners.lora import LoraLayer

    deltas = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            wanted = module.active_adapters if adapters is None else adapters
            if merged := [module.get_delta_weight(a) for a in wanted if a in module.lora_A]:
                deltas[base_name(f"{name}.base_layer.weight")] = sum(merged)
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        plain = base_name(name)
        yield plain, (p.detach() + deltas[plain]) if plain in deltas else p.detach()


def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain model (the base class, ``save_pretrained``-ready) with the adapters merged."""
    return copy.deepcopy(model).merge_and_unload()


def adapter_export(model: torch.nn.Module) -> tuple[dict, list[tuple[str, torch.Tensor]]]:
    """The adapter as ``save_pretrained`` writes it: ``adapter_config.json``'s fields and the
    tensors under their saved names (what an engine serving adapters loads)."""
    from peft import get_peft_model_state_dict

    with tempfile.TemporaryDirectory() as tmp:
        model.peft_config["default"].save_pretrained(tmp)
        config = json.loads((Path(tmp) / "adapter_config.json").read_text())
    return config, [(n, t.detach()) for n, t in get_peft_model_state_dict(model).items()]


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights by parameter name (what a checkpoint needs besides the base)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``adapter_state`` back in place (an optimiser built over the adapters keeps
    pointing at them)."""
    params = dict(model.named_parameters())
    if set(state) != {n for n in params if "lora_" in n}:
        raise ValueError("the saved adapter does not match this model's LoRA layers")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
