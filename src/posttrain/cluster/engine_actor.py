"""Rollout engines as Ray actors, behind the ``Engine`` protocol.

``EngineActor`` is the engine an engine member builds (``engine.name``; ``EngineFamily.build``)
in its own process, from a model directory. ``RayEngine`` is the client the pipelines hold:
every protocol call becomes a remote call. Weights travel through the object store in buckets
of about ``bucket_bytes``: the sender holds one bucket at a time and the actor loads them one
at a time, so neither side makes a whole extra copy in its own memory (the object store holds
them, spilling to disk if it must). ``RayEngine`` keeps the last weights' bucket references;
when the actor dies mid-call, Ray restarts it (it comes back with the directory's weights),
``RayEngine`` sends those weights and their version again and raises ``EngineRestarted`` so
the caller dispatches the lost work again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence

import torch

from posttrain.config.sections.engine import EngineFamily
from posttrain.engines import EngineRestarted, GenerationOutput
from posttrain.types import SamplingParams


class EngineActor:
    """Runs in the actor's process. ``fail_at_call`` (fault injection for tests): the n-th
    ``generate`` call kills the process, once per ``fail_marker`` file (whichever actor
    creates it)."""

    def __init__(self, engine: EngineFamily, model_dir: str, dtype: str, pad_token_id: int,
                 eos_token_id: int | None, threads: int, fail_at_call: int | None = None,
                 fail_marker: str | None = None) -> None:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        self.engine = engine.build(model_dir, dtype, pad_token_id, eos_token_id)
        self.calls, self.fail_at_call, self.fail_marker = 0, fail_at_call, fail_marker

    def generate(self, prompts, sampling, seeds) -> list[GenerationOutput]:
        self.calls += 1
        if self.calls == self.fail_at_call and self._claim_failure():
            os._exit(1)
        return self.engine.generate(prompts, sampling, seeds)

    def _claim_failure(self) -> bool:
        """Create the marker atomically: of actors sharing it, exactly one fails."""
        try:
            os.close(os.open(self.fail_marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return False
        return True

    def update_weights(self, buckets: list, version: int) -> int:
        """``buckets``: object references, each to a list of ``(name, tensor)``, fetched and
        loaded one after the other."""
        import ray

        self.engine.update_weights((item for ref in buckets for item in ray.get(ref)), version)
        return version

    def version(self) -> int:
        return self.engine.version

    def weights_checksum(self) -> str:
        return self.engine.weights_checksum()

    def score(self, sequences) -> list[list[float]]:
        return self.engine.score(sequences)

    def pid(self) -> int:
        return os.getpid()

    def placement_group(self) -> str | None:
        """The id of the placement group this actor runs in (None: none)."""
        import ray

        group = ray.get_runtime_context().get_placement_group_id()
        return None if group is None else str(group)


class RayEngine:
    """``Engine`` whose work runs in an ``EngineActor``."""

    def __init__(self, actor, restart_timeout_s: float = 120.0, group=None,
                 bucket_bytes: int = 256 << 20) -> None:
        """``group``: the placement group the actor was placed in, if any."""
        import ray

        self._ray, self.actor, self.group = ray, actor, group
        self.bucket_bytes, self.restart_timeout_s = bucket_bytes, restart_timeout_s
        self._version = ray.get(actor.version.remote())
        self._last: tuple[list, int] | None = None  # the last weights' bucket refs, version

    @property
    def version(self) -> int:
        return self._version

    def _get(self, ref):
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._restore()
            raise EngineRestarted(f"engine actor restarted: {exc}") from exc

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
        if self._last is not None:
            self._ray.get(self.actor.update_weights.remote(*self._last))

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[GenerationOutput]:
        return self._get(self.actor.generate.remote(
            [list(p) for p in prompts], sampling, None if seeds is None else list(seeds)))

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
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
        self._version = version

    def weights_checksum(self) -> str:
        return self._get(self.actor.weights_checksum.remote())

    def score(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._get(self.actor.score.remote([list(s) for s in sequences]))
