"""What effort control offers reward shaping."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from posttrain.types import Episode


def effort_levels(episodes: Sequence[Episode]) -> dict[str, Callable[[], torch.Tensor]]:
    """``efforts``: each episode's level (``meta["effort"]``)."""
    return {"efforts": lambda: torch.tensor([e.meta["effort"] for e in episodes])}
