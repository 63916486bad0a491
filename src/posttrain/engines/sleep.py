"""Engine sleep: an engine colocated with the trainer frees its weights' memory during the
update and gets it back with the next weight sync (what vLLM's ``sleep(level=2)`` and
SGLang's ``release_memory_occupation`` do on a GPU).

``FreedStorage`` does it for plain torch modules: every distinct storage behind the
parameters is resized to zero bytes (the tensors, their views and fused tensors stay the same
objects, so a decoder's fused projections and the engine's name -> parameter map stay valid)
and resized back, uninitialised, on ``restore``; the weight sync then writes every value.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class EngineAsleepError(RuntimeError):
    """The engine was asked to compute while its weights are released (or not yet loaded
    again after a sleep)."""


class FreedStorage:
    """The storages of ``params`` released; ``restore`` gives each its size back."""

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        storages = _storages(params)
        if not all(s.resizable() for s in storages.values()):  # numpy viewed it, or mmap
            raise RuntimeError("engine.sleep cannot release weights whose memory another "
                               "object shares (a numpy view, a memory-mapped file)")
        self._sizes = [(s, s.nbytes()) for s in storages.values()]
        for storage, _ in self._sizes:
            storage.resize_(0)

    @property
    def nbytes(self) -> int:
        """The bytes released."""
        return sum(n for _, n in self._sizes)

    def restore(self) -> None:
        for storage, size in self._sizes:
            storage.resize_(size)


def _storages(params: Iterable[torch.Tensor]) -> dict[int, torch.UntypedStorage]:
    """The distinct storages behind ``params`` (views and tied weights share one)."""
    return {p.untyped_storage().data_ptr(): p.untyped_storage() for p in params}


def held_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``params`` (0 for released ones)."""
    return sum(s.nbytes() for s in _storages(params).values())
