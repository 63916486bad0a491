"""Where a model runs: ``auto`` (a CUDA device if there is one, else the CPU), ``cpu``,
``cuda`` or ``cuda:N``."""

from __future__ import annotations

import os

import torch


def model_device(model: torch.nn.Module) -> torch.device:
    """Where ``model``'s parameters are (inputs go there; results come back to the caller's
    tensors' device)."""
    return next(model.parameters()).device


def placed(model: torch.nn.Module, device: str, key: str = "device") -> torch.nn.Module:
    """``model`` moved to the device ``device`` names (``resolve_device``)."""
    return model.to(resolve_device(device, key))


def resolve_device(name: str, key: str = "device") -> torch.device:
    """The device ``name`` means here (``auto`` in a process of a launched group: GPU
    ``LOCAL_RANK``); a CUDA device this machine lacks is a ``ValueError`` naming ``key``."""
    if name == "auto":
        return (torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                if torch.cuda.is_available() else torch.device("cpu"))
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{key}: {name} needs a CUDA GPU, and torch sees none "
                             "(torch.cuda.is_available() is False); use cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{key}: {name} does not exist; this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"{key}: {name!r} is not auto, cpu, cuda or cuda:N")
    return device


def full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value gathered whole; a plain tensor as is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
