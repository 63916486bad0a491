"""A fingerprint of model weights, so that a weight sync can be verified end to end."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def weights_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """BLAKE2b over the names, dtypes, shapes and raw bytes of the tensors, in name order: two
    sides hold the same weights exactly when their checksums agree."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(named_tensors, key=lambda item: item[0]):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
