"""A reward synthesised from its named parts by a catalogue function (``grs``) instead of
their weighted sum."""

from __future__ import annotations

from collections.abc import Mapping


def synthesised(name: str, inputs: Mapping[str, str], parts: Mapping[str, float]) -> float:
    """``name``'s reward for one sample whose input ``k`` is the part ``inputs[k]``."""
    import torch  # here, not above: validating a config never imports torch

    from posttrain.algos import get

    value = get("advantage", name)(**{k: torch.tensor([float(parts[part])], dtype=torch.float64)
                                      for k, part in inputs.items()})
    return float(value[0])
