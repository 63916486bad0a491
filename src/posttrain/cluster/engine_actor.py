"""``EngineActor``: the engine an engine member builds (``engine.name``;
``EngineFamily.build``) from a model directory, in a Ray actor's process; ``RayEngine``
(``cluster.ray_engine``) is its client. Weights come as object-store buckets
(``update_weights``) or over a weight group (``join_weight_group``, ``receive_weights``)."""

from __future__ import annotations

import os

import torch

from posttrain.cluster.weight_group import WeightGroup
from posttrain.config.sections.engine import EngineFamily
from posttrain.engines import GenerationOutput


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

    def update_adapter(self, tensors: list, config: dict, version: int) -> int:
        self.engine.update_adapter(tensors, config, version)
        return version

    def serves_adapters(self) -> bool:
        return getattr(self.engine, "serves_adapters", False)

    def join_weight_group(self, host: str, port: int, device: str) -> None:
        self.weight_group = WeightGroup(host, port, 1, device)

    def receive_weights(self, version: int) -> int:
        """Load the weights the driver broadcasts over the weight group; what the engine
        did not read is drained, so the driver's broadcast always ends."""
        stream = self.weight_group.receive()
        try:
            self.engine.update_weights(stream, version)
        finally:
            for _ in stream:
                pass
        return version

    def version(self) -> int:
        return self.engine.version

    def sleep(self) -> None:
        self.engine.sleep()

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
