"""Verified weight sync (the anchors' users' worst failures are sync hangs and silent weight
corruption). Every sync carries a version and a checksum of the trainer's weights; it must
finish within a timeout; the engine must then report the same checksum; and trainer and
engine score the same probe sequences, their mean |log-prob difference| logged and bounded.
Any failure is an error naming the versions, never a silent stall or a drifting run."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass

from posttrain.engines import Engine, weights_checksum
from posttrain.settings import SyncConfig
from posttrain.train import PolicyTrainer
from posttrain.types import Batch, Episode, Segment
from posttrain.types.errors import WeightSyncError


@dataclass(frozen=True)
class SyncReport:
    version: int
    checksum: str
    mismatch: float  # mean |trainer - engine| log-prob over the probes' tokens (0 without)
    seconds: float

    def metrics(self) -> dict[str, float]:
        return {"sync/mismatch": self.mismatch, "sync/seconds": self.seconds}


def sync_weights(trainer: PolicyTrainer, engine: Engine, version: int,
                 probes: Sequence[Sequence[int]] = (), cfg: SyncConfig = SyncConfig()
                 ) -> SyncReport:
    """Send the trainer's weights to ``engine`` as ``version`` and verify them."""
    start = time.perf_counter()
    named = list(trainer.named_weights())
    checksum = weights_checksum(named)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(engine.update_weights, named, version).result(timeout=cfg.timeout_s)
    except concurrent.futures.TimeoutError:
        raise WeightSyncError(f"weight sync to version {version} did not finish within "
                              f"{cfg.timeout_s:g} s (engine still at version "
                              f"{engine.version})") from None
    finally:
        pool.shutdown(wait=False)
    held = engine.weights_checksum()
    if held != checksum:
        raise WeightSyncError(f"weight sync to version {version}: the engine holds weights "
                              f"with checksum {held}, the trainer sent {checksum}")
    mismatch = probe_mismatch(trainer, engine, probes) if probes else 0.0
    if mismatch > cfg.tolerance:
        raise WeightSyncError(
            f"after the sync to version {version} (engine version {engine.version}) the engine's "
            f"log-probs differ from the trainer's by {mismatch:.3g} > tolerance {cfg.tolerance}")
    return SyncReport(version, checksum, mismatch, time.perf_counter() - start)


def probe_mismatch(trainer: PolicyTrainer, engine: Engine,
                   probes: Sequence[Sequence[int]]) -> float:
    """Mean |trainer - engine| log-prob over every token of ``probes`` but the first."""
    segments = [Segment(list(p), [0] + [1] * (len(p) - 1), [0.0] * len(p), [-1] * len(p))
                for p in probes]
    batch = Batch.from_episodes([Episode([s]) for s in segments], pad_token_id=0)
    ours = trainer.compute_logprobs(batch)
    theirs = engine.score(probes)
    total, count = 0.0, 0
    for i, p in enumerate(probes):
        for t in range(1, len(p)):
            total += abs(float(ours[i, t]) - theirs[i][t])
            count += 1
    return total / max(count, 1)
