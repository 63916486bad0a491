"""What a swarm offers reward shaping."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from posttrain.types import Episode


def parl_parts(episodes: Sequence[Episode]) -> dict[str, Callable[[], torch.Tensor]]:
    """PARL's ``parallel`` and ``finish`` parts of each swarm episode (0 for others)."""
    return {part: lambda part=part: torch.tensor(
        [e.meta.get("parl", {}).get(part, 0.0) for e in episodes], dtype=torch.float64)
        for part in ("parallel", "finish")}
