"""Weights by collective (``dist.weight_transport: collective``): a torch.distributed group of
the driver (rank 0) and one engine actor (rank 1), made from a ``TCPStore`` and a gloo (CPU) or
NCCL (CUDA) process group constructed directly, so it needs no default group and lives beside
any other group either process has (what peers do with vLLM's ``StatelessProcessGroup``).

The driver broadcasts the weights in buckets of about ``bucket_bytes``: a header ``[meta
bytes, data bytes]``, the bucket's names, dtypes, shapes and offsets as JSON bytes, then one
flat byte buffer (every tensor at a 64-byte-aligned offset, so the receiver's tensors are views
of it); a header ``[0, 0]`` ends the weights. Each side holds one bucket at a time. Every
collective waits at most ``timeout_s`` and then raises ``WeightSyncError`` naming the step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from posttrain.types.errors import WeightSyncError

ALIGN = 64


class WeightGroup:
    """One side of the two-process group at ``host:port`` (rank 0 hosts the store)."""

    def __init__(self, host: str, port: int, rank: int, device: str = "cpu",
                 timeout_s: float = 300.0) -> None:
        self.rank, self.device, self.timeout = rank, torch.device(device), timedelta(
            seconds=timeout_s)
        try:
            store = dist.TCPStore(host, port, 2, is_master=rank == 0, timeout=self.timeout,
                                  wait_for_workers=False)
            if self.device.type == "cuda":
                self.group = dist.ProcessGroupNCCL(store, rank, 2)
            else:
                self.group = dist.ProcessGroupGloo(store, rank, 2, self.timeout)
        except (RuntimeError, dist.DistStoreError) as exc:
            raise WeightSyncError(f"the weight group at {host}:{port} (rank {rank}) did not "
                                  f"form within {timeout_s:g} s: {exc}") from exc

    def _broadcast(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        try:
            self.group.broadcast(tensor, 0).wait(self.timeout)
        except RuntimeError as exc:
            raise WeightSyncError(f"weight broadcast ({what}, rank {self.rank}) failed or did "
                                  f"not finish within {self.timeout.total_seconds():g} s: "
                                  f"{exc}") from exc
        return tensor

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
             bucket_bytes: int) -> int:
        """Broadcast the weights bucket by bucket (rank 0); returns the bytes sent."""
        bucket, size, sent = [], 0, 0
        for name, tensor in named_tensors:
            bucket.append((name, tensor.detach()))
            size = _aligned(size) + tensor.numel() * tensor.element_size()
            if size >= bucket_bytes:
                sent += self._send_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            sent += self._send_bucket(bucket)
        self._broadcast(torch.zeros(2, dtype=torch.int64, device=self.device), "end")
        return sent

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> int:
        meta, offset = [], 0
        for name, t in bucket:
            offset = _aligned(offset)
            meta.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), offset])
            offset += t.numel() * t.element_size()
        data = torch.zeros(offset, dtype=torch.uint8, device=self.device)
        for (_, t), (*_, start) in zip(bucket, meta):
            flat = t.to(self.device).contiguous().reshape(-1).view(torch.uint8)
            data[start:start + flat.numel()] = flat
        text = torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8,
                            device=self.device)
        self._broadcast(torch.tensor([text.numel(), offset], device=self.device), "header")
        self._broadcast(text, "metadata")
        self._broadcast(data, "bucket")
        return offset

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights rank 0 sends, one bucket at a time (rank 1): views of the bucket."""
        while True:
            header = self._broadcast(torch.zeros(2, dtype=torch.int64, device=self.device),
                                     "header")
            meta_bytes, data_bytes = (int(x) for x in header.tolist())
            if meta_bytes == 0:
                return
            text = self._broadcast(torch.empty(meta_bytes, dtype=torch.uint8,
                                               device=self.device), "metadata")
            data = self._broadcast(torch.empty(data_bytes, dtype=torch.uint8,
                                               device=self.device), "bucket")
            for name, dtype, shape, start in json.loads(bytes(text.cpu().tolist())):
                dtype = getattr(torch, dtype)
                size = math.prod(shape) * dtype.itemsize
                yield name, data[start:start + size].view(dtype).reshape(shape)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN
