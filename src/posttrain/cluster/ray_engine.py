"""``RayEngine``: a rollout engine in a Ray actor (``cluster.engine_actor``) behind the
``Engine`` protocol; the pipelines hold it and every protocol call becomes a remote call.

Weights travel in buckets of about ``bucket_bytes`` (the sender holds one bucket at a time, the
actor loads them one at a time) by one of two transports: the object store (the default:
neither side makes a whole extra copy in its own memory; the store holds them, spilling to disk
if it must), or a collective (a broadcast over a two-process gloo/NCCL group of the driver and
the actor, ``cluster.weight_group``). ``RayEngine`` keeps the last weights (the object store's
bucket references, or a host copy for the collective when ``keep_last``); when the actor dies
mid-call, Ray restarts it (it comes back with the directory's weights), ``RayEngine`` sends it
those weights and their version again and raises ``EngineRestarted`` so the caller dispatches
the lost work again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence

import torch

from posttrain.cluster.processes import free_port
from posttrain.cluster.weight_group import WeightGroup
from posttrain.engines import EngineRestarted, GenerationOutput
from posttrain.types import SamplingParams
from posttrain.types.errors import WeightSyncError


class RayEngine:
    """``Engine`` whose work runs in an ``EngineActor``."""

    def __init__(self, actor, restart_timeout_s: float = 120.0, group=None,
                 bucket_bytes: int = 256 << 20, collective: str | None = None,
                 keep_last: bool = True) -> None:
        """``group``: the placement group the actor was placed in, if any; ``collective``:
        the device (``cpu``: gloo, ``cuda``: NCCL) of a weight group to send weights over
        instead of the object store; ``keep_last``: keep the collective's last weights in
        host memory to restore a restarted actor (the object store's are always kept)."""
        import ray

        self._ray, self.actor, self.group = ray, actor, group
        self.bucket_bytes, self.restart_timeout_s = bucket_bytes, restart_timeout_s
        self.collective, self.keep_last = collective, keep_last
        self._link: WeightGroup | None = None  # the collective's group, joined when first used
        self._version = ray.get(actor.version.remote())
        self.serves_adapters = ray.get(actor.serves_adapters.remote())
        self._last: tuple[list, int] | None = None  # the last weights (refs or tensors), version
        self._adapter: tuple | None = None  # the last adapter's (ref, config, version)

    @property
    def version(self) -> int:
        return self._version

    @contextlib.contextmanager
    def _restarting(self) -> Iterator[None]:
        """An actor that dies inside is restarted and restored; ``EngineRestarted`` says so."""
        try:
            yield
        except self._ray.exceptions.RayActorError as exc:
            self._restore()
            raise EngineRestarted(f"engine actor restarted: {exc}") from exc

    def _get(self, ref):
        with self._restarting():
            return self._ray.get(ref)

    def _restore(self) -> None:
        """Wait for Ray to restart the actor; give it the last weights again."""
        deadline = time.monotonic() + self.restart_timeout_s
        while True:
            try:
                self._ray.get(self.actor.version.remote(), timeout=self.restart_timeout_s)
                break
            except self._ray.exceptions.ActorDiedError as exc:
                raise RuntimeError("the engine actor died and will not be restarted "
                                   "(dist.max_restarts spent)") from exc
            except self._ray.exceptions.RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._link = None  # the new process is in no group
        if self._last is not None and self.collective:
            self._broadcast(*self._last)
        elif self._last is not None:
            self._ray.get(self.actor.update_weights.remote(*self._last))
        if self._adapter is not None:
            self._ray.get(self.actor.update_adapter.remote(*self._adapter))

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[GenerationOutput]:
        return self._get(self.actor.generate.remote(
            [list(p) for p in prompts], sampling, None if seeds is None else list(seeds)))

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        self._adapter = None  # new base weights: the actor's engine drops its adapter
        if self.collective:
            kept: list[tuple[str, torch.Tensor]] = []
            with self._restarting():
                self._broadcast(self._keeping(named_tensors, kept), version)
            self._last = (kept, version) if self.keep_last else None
        else:
            self._put_buckets(named_tensors, version)
        self._version = version

    def update_adapter(self, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict,
                       version: int) -> None:
        """The LoRA adapter alone, for an actor whose engine serves adapters; through the
        object store (it is small) and kept to restore a restarted actor."""
        ref = self._ray.put([(n, t.detach().to("cpu", copy=True)) for n, t in named_tensors])
        self._adapter = (ref, config, version)
        self._get(self.actor.update_adapter.remote(ref, config, version))
        self._version = version

    def _keeping(self, named_tensors, kept: list):
        for name, tensor in named_tensors:
            if self.keep_last:
                kept.append((name, tensor.detach().to("cpu", copy=True)))
            yield name, tensor

    def _broadcast(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Send the weights over the weight group (joined first if need be); an actor that
        died raises ``RayActorError``."""
        if self._link is None:
            host, port = self._ray.util.get_node_ip_address(), free_port()
            joined = self.actor.join_weight_group.remote(host, port, self.collective)
            self._link = WeightGroup(host, port, 0, self.collective)
            self._ray.get(joined)
        done = self.actor.receive_weights.remote(version)
        try:
            self._link.send(named_tensors, self.bucket_bytes)
        except WeightSyncError:
            self._link = None
            self._ray.get(done)  # the actor's own error, if it has one
            raise
        self._ray.get(done)

    def _put_buckets(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                     version: int) -> None:
        refs, bucket, size = [], [], 0
        for name, tensor in named_tensors:
            t = tensor.detach().to("cpu", copy=True)
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= self.bucket_bytes:
                refs.append(self._ray.put(bucket))
                bucket, size = [], 0
        if bucket or not refs:
            refs.append(self._ray.put(bucket))
        self._last = (refs, version)
        self._get(self.actor.update_weights.remote(refs, version))

    def weights_checksum(self) -> str:
        return self._get(self.actor.weights_checksum.remote())

    def sleep(self) -> None:
        """The actor's engine frees its weights (``Sleeper``) until the next
        ``update_weights``; a restarted actor comes back awake."""
        self._get(self.actor.sleep.remote())

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._get(self.actor.score.remote([list(s) for s in sequences]))
