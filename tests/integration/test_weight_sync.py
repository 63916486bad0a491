"""Verified weight sync: checksums, timeouts and probe scoring catch hangs, silent corruption
and an engine that scores differently from the trainer."""

import hashlib
import threading

import pytest
import torch

from posttrain.config import OptimConfig, SyncConfig
from posttrain.engines import TorchEngine, weights_checksum
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.train import Trainer
from posttrain.types.errors import WeightSyncError

PROBES = [[1, 5, 9, 13, 2], [4, 4, 8]]


def test_checksum_tells_weights_apart():
    a = [("w", torch.arange(6.0).reshape(2, 3)), ("b", torch.ones(3))]
    assert weights_checksum(a) == weights_checksum(list(reversed(a)))  # name order, not input
    changed = [("w", a[0][1].clone()), ("b", a[1][1])]
    changed[0][1][1, 2] += 1e-3
    assert weights_checksum(changed) != weights_checksum(a)
    assert weights_checksum([("w", a[0][1].to(torch.bfloat16))]) != weights_checksum(a[:1])


def test_checksum_is_its_definition_when_hashed_on_threads():
    """BLAKE2b over the sorted per-tensor digests (name, dtype, shape, bytes), computed here
    one tensor after another, for more tensors than the digest hashes at once."""
    from posttrain.engines.weights import IN_FLIGHT

    g = torch.Generator().manual_seed(0)
    named = [(f"t{i}", torch.randn(i + 1, 3, generator=g)) for i in range(3 * IN_FLIGHT + 1)]
    named.append(("half", torch.randn(5, generator=g).to(torch.bfloat16)))

    def digest(name, t):
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
        return h.digest()

    expected = hashlib.blake2b(b"".join(sorted(digest(n, t) for n, t in named)),
                               digest_size=16).hexdigest()
    assert weights_checksum(named) == expected


@pytest.fixture
def trainer_and_engine(model, tokenizer):
    trainer = Trainer(model, OptimConfig(lr=1e-3), 10)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    with torch.no_grad():  # the trainer moved on: the engine is one version behind
        next(model.parameters()).add_(0.01)
    return trainer, engine


def test_a_sync_is_verified_by_checksum_and_probes(trainer_and_engine):
    trainer, engine = trainer_and_engine
    assert engine.weights_checksum() != weights_checksum(trainer.named_weights())
    report = sync_weights(trainer, engine, 3, PROBES)
    assert engine.version == 3 and engine.weights_checksum() == report.checksum
    # trainer and engine: two float32 computations of the same log-probs, within 16 eps32 of
    # the largest (~8 chained reductions through the model, head and logsumexp, ~2 eps32 each)
    scale = max(abs(x) for row in engine.score(PROBES) for x in row)
    bound = 16 * torch.finfo(torch.float32).eps * scale
    assert report.mismatch < bound and set(report.metrics()) == {"sync/mismatch",
                                                                 "sync/seconds", "sync/mib"}
    whole = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    assert report.nbytes == whole  # every tensor sent (the tied head once)


class Corrupting(TorchEngine):
    """Loads the weights, then silently flips one value (a bad transfer)."""

    def update_weights(self, named_tensors, version):
        super().update_weights(named_tensors, version)
        with torch.no_grad():
            next(iter(self._params.values())).view(-1)[0] += 1.0


class Hanging(TorchEngine):
    """Hangs in its update until the test releases it (``hang_guard`` seconds at most, so a
    sync that waits for it cannot hang the suite), recording when it entered and finished."""

    hang_guard = 30.0

    def update_weights(self, named_tensors, version):
        self.entered.set()
        self.released_in_time = self.release.wait(self.hang_guard)
        self.finished.set()


class Drifting(TorchEngine):
    """Holds the right weights but scores with another temperature (a config mismatch)."""

    def score(self, sequences):
        return [[lp / 0.9 for lp in row] for row in super().score(sequences)]


def swap(engine, cls):
    engine.__class__ = cls
    return engine


def test_silent_corruption_is_caught_by_the_checksum(trainer_and_engine):
    trainer, engine = trainer_and_engine
    with pytest.raises(WeightSyncError, match="sync to version 4: the engine holds weights"):
        sync_weights(trainer, swap(engine, Corrupting), 4, PROBES)


def test_a_hanging_sync_becomes_an_error(trainer_and_engine):
    """The sync gives up at its timeout while the engine's update is still hanging: it
    neither waits for the update nor counts the engine as synced."""
    trainer, engine = trainer_and_engine
    engine = swap(engine, Hanging)
    engine.entered, engine.release, engine.finished = (threading.Event() for _ in range(3))
    before = engine.version
    try:
        with pytest.raises(WeightSyncError, match=f"version 5 did not finish within 0.2 s "
                                                  fr"\(engine still at version {before}\)"):
            sync_weights(trainer, engine, 5, PROBES, SyncConfig(timeout_s=0.2))
        assert not engine.finished.is_set()  # the error came while the update hung
        assert engine.version == before != 5
        # the update was sent (on a loaded machine its thread may start after the timeout)
        assert engine.entered.wait(Hanging.hang_guard)
    finally:
        engine.release.set()
    assert engine.finished.wait(Hanging.hang_guard) and engine.released_in_time


def test_an_engine_scoring_differently_stops_the_run(trainer_and_engine):
    trainer, engine = trainer_and_engine
    with pytest.raises(WeightSyncError, match=r"version 6 \(engine version 6\).*differ"):
        sync_weights(trainer, swap(engine, Drifting), 6, PROBES)


def test_weights_stream_to_the_engine_one_at_a_time(trainer_and_engine):
    """A sync keeps no whole copy of what it sends (a sharded trainer gathers each parameter
    in turn): at most one gathered tensor is alive when the next is made, and the streamed
    fingerprint still equals the engine's."""
    import weakref

    trainer, engine = trainer_and_engine
    alive: list[weakref.ref] = []
    most = 0

    def gathered_one_at_a_time():
        nonlocal most
        for name, p in trainer.model.named_parameters():
            most = max(most, sum(r() is not None for r in alive))
            whole = p.detach().clone()  # what FSDP2's full_tensor() makes of a shard
            alive.append(weakref.ref(whole))
            yield name, whole

    trainer.named_weights = gathered_one_at_a_time
    report = sync_weights(trainer, engine, 7, PROBES)
    assert len(alive) == len(list(trainer.model.parameters())) > 2
    assert most <= 1, most
    assert engine.weights_checksum() == report.checksum == weights_checksum(
        trainer.model.named_parameters())


def test_a_cast_sync_reports_what_was_sent_and_a_plain_one_what_is_held(model, tokenizer):
    """A bf16 engine sent fp32 weights (half of them already bf16) reports the fingerprint of
    what was sent; sent bf16 weights alone, it reports its own."""
    engine = TorchEngine(model, tokenizer.pad_token_id, dtype=torch.bfloat16)
    sent = [(n, p.detach().to(torch.bfloat16) if i % 2 else p.detach().clone())
            for i, (n, p) in enumerate(model.named_parameters())]
    engine.update_weights(iter(sent), 1)
    assert engine.weights_checksum() == weights_checksum(sent)
    held = [(n, p.detach().to(torch.bfloat16)) for n, p in model.named_parameters()]
    assert engine.weights_checksum() != weights_checksum(held)  # fp32 halves were sent
    engine.update_weights(iter(held), 2)
    assert engine.weights_checksum() == weights_checksum(held)
