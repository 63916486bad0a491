"""Scoring with a model that may be training: eval mode (no dropout), no gradient, and its
mode restored afterwards, also when the scoring raises."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def frozen(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode without gradient; its mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
