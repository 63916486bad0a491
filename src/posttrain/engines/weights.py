"""A fingerprint of model weights, so that a weight sync can be verified end to end.

Each tensor is hashed alone (BLAKE2b over its name, dtype, shape and raw bytes) and the
fingerprint hashes the sorted tensor digests: it does not depend on the order the tensors
come in, so weights streamed one at a time are fingerprinted as they pass (``WeightsDigest``)
without being kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import torch


def _tensor_digest(name: str, tensor: torch.Tensor) -> bytes:
    # a copy: numpy viewing a tensor's own storage would pin that storage's size for good
    # (an engine could no longer release it to sleep)
    t = tensor.detach().to("cpu", copy=True).contiguous()
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.digest()


class WeightsDigest:
    """``weights_checksum`` of the tensors that pass through ``passing``, keeping none;
    ``nbytes`` counts their bytes."""

    def __init__(self) -> None:
        self._digests: list[bytes] = []
        self.nbytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self._digests.append(_tensor_digest(name, tensor))
        self.nbytes += tensor.numel() * tensor.element_size()

    def passing(self, named_tensors: Iterable[tuple[str, torch.Tensor]]
                ) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in named_tensors:
            self.add(name, tensor)
            yield name, tensor

    def hexdigest(self) -> str:
        return hashlib.blake2b(b"".join(sorted(self._digests)), digest_size=16).hexdigest()


def weights_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Two sides hold the same weights exactly when their checksums agree (in any order)."""
    digest = WeightsDigest()
    for name, tensor in named_tensors:
        digest.add(name, tensor)
    return digest.hexdigest()
