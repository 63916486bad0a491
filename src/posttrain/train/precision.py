"""Mixed precision (``trainer.precision``): parameters and optimiser state stay fp32 (the
master weights), forward passes run under ``torch.autocast`` in bf16 or fp16, and log-softmax
and losses are computed in fp32 on top (``models.logprobs`` upcasts the logits). fp16 scales
the loss (``GradScaler``): an overflowing step is skipped and the scale lowered, without
counting as a bad step.

Why fp32 parameters under autocast rather than bf16 parameters with a separate fp32 master
copy: one copy of the weights instead of two, the optimiser needs no custom step, and every
gradient reaches the fp32 weights unrounded; the price is that the matmuls cast the weights to
bf16 on every forward, which is cheap next to the matmul itself."""

from __future__ import annotations

import contextlib
import math

import torch

from posttrain.settings.trainer_config import COMPUTE_DTYPES


class Precision:
    """The compute precision ``name`` (``fp32``, ``bf16``, ``fp16``) on ``device_type``."""

    def __init__(self, name: str, device_type: str) -> None:
        if name not in COMPUTE_DTYPES:
            raise ValueError(f"unknown precision {name!r}; known: {', '.join(COMPUTE_DTYPES)}")
        if name == "fp16" and device_type != "cuda":
            raise ValueError("trainer.precision fp16 needs a CUDA device (loss scaling for "
                             f"fp16 runs there); on {device_type} use bf16")
        self.name, self.device_type = name, device_type
        self.dtype = getattr(torch, COMPUTE_DTYPES[name])
        self.scaler = torch.amp.GradScaler(device_type) if name == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """Forward passes in the compute dtype (nothing for fp32)."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size before clipping (fp16)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def overflowed(self, loss: float, grad_norm: float) -> bool:
        """An fp16 step whose loss is finite but whose scaled gradients overflowed: the scale
        is lowered and the step skipped (not a sign of divergence)."""
        if self.scaler is None or not math.isfinite(loss) or math.isfinite(grad_norm):
            return False
        self.scaler.update()
        return True

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return {} if self.scaler is None else {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
