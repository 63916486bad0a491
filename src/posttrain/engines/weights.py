"""A fingerprint of model weights, so that a weight sync can be verified end to end, and the
verified send itself (``send_verified``).

Each tensor is hashed alone (BLAKE2b over its name, dtype, shape and raw bytes) and the
fingerprint hashes the sorted tensor digests: it does not depend on the order the tensors
come in, so weights streamed one at a time are fingerprinted as they pass (``WeightsDigest``)
without being kept. Each tensor is copied to the host as it passes and hashed on a pool of
threads (BLAKE2b releases the GIL), at most ``IN_FLIGHT`` host copies a digest at a time: on
one H200, hashing 0.6B fp32 parameters on one thread took 4.1 s of a 6.1 s GRPO step
(docs/performance.md).
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from posttrain.types.errors import WeightSyncError

IN_FLIGHT = 8  # host copies a digest hashes at once


@functools.cache
def _hashers() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(min(IN_FLIGHT, os.cpu_count() or 1),
                                                 thread_name_prefix="weights-digest")


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    # a copy: numpy viewing a tensor's own storage would pin that storage's size for good (an
    # engine could no longer release it to sleep); made at once, so that a gathered tensor on
    # the device is freed as the stream moves on
    return tensor.detach().to("cpu", copy=True).contiguous()


def _digest(name: str, t: torch.Tensor) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy())
    return digest.digest()


class WeightsDigest:
    """``weights_checksum`` of the tensors that pass through ``passing``, keeping none (host
    copies until hashed); ``nbytes`` counts their bytes."""

    def __init__(self) -> None:
        self._digests: list[bytes] = []
        self._pending: deque[concurrent.futures.Future] = deque()
        self.nbytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        while len(self._pending) >= IN_FLIGHT:
            self._digests.append(self._pending.popleft().result())
        self._pending.append(_hashers().submit(_digest, name, _host_copy(tensor)))
        self.nbytes += tensor.numel() * tensor.element_size()

    def passing(self, named_tensors: Iterable[tuple[str, torch.Tensor]]
                ) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in named_tensors:
            self.add(name, tensor)
            yield name, tensor

    def hexdigest(self) -> str:
        while self._pending:
            self._digests.append(self._pending.popleft().result())
        return hashlib.blake2b(b"".join(sorted(self._digests)), digest_size=16).hexdigest()


def weights_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Two sides hold the same weights exactly when their checksums agree (in any order)."""
    digest = WeightsDigest()
    for name, tensor in named_tensors:
        digest.add(name, tensor)
    return digest.hexdigest()


def send_verified(engine: Any, weights: Iterable[tuple[str, torch.Tensor]], version: int,
                  timeout_s: float, adapter_config: dict | None = None) -> WeightsDigest:
    """Send ``weights`` to ``engine`` as ``version`` (with ``adapter_config``: they are a LoRA
    adapter, for an engine that serves adapters, ``update_adapter``; else ``update_weights``),
    fingerprinted as they pass; ``WeightSyncError`` when the send takes over ``timeout_s`` or
    the engine's ``weights_checksum`` afterwards is not the fingerprint. Returns the digest
    (``hexdigest()``, ``nbytes``)."""
    sent = WeightsDigest()
    if adapter_config is not None:
        send = functools.partial(engine.update_adapter, sent.passing(weights), adapter_config,
                                 version)
    else:
        send = functools.partial(engine.update_weights, sent.passing(weights), version)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(send).result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise WeightSyncError(f"weight sync to version {version} did not finish within "
                              f"{timeout_s:g} s (engine still at version "
                              f"{engine.version})") from None
    finally:
        pool.shutdown(wait=False)
    held, checksum = engine.weights_checksum(), sent.hexdigest()
    if held != checksum:
        raise WeightSyncError(f"weight sync to version {version}: the engine holds weights "
                              f"with checksum {held}, the trainer sent {checksum}")
    return sent
