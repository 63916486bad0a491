"""Staleness in asynchronous RL: how many weight versions ago each trainable token was sampled,
and the loss mask without the tokens older than the bound (``staleness_mask``)."""

from __future__ import annotations

from posttrain.algos import get
from posttrain.types import Batch


def staleness_metrics(batch: Batch, version: int) -> dict[str, float]:
    """Mean and max ``version - v_t`` over the trainable tokens, and the share of samples whose
    tokens come from more than one version (partial rollouts that crossed a weight update)."""
    mask = batch.loss_mask > 0
    lag = (version - batch.versions)[mask].float()
    vers = batch.versions.masked_fill(~mask, -1)
    lo = vers.masked_fill(~mask, 2**62).min(dim=1).values
    mixed = ((vers.max(dim=1).values != lo) & mask.any(dim=1)).float().mean()
    return {"staleness/mean": float(lag.mean()) if lag.numel() else 0.0,
            "staleness/max": float(lag.max()) if lag.numel() else 0.0,
            "staleness/mixed_versions": float(mixed)}


def fresh_tokens(batch: Batch, version: int, max_staleness: int | None
                 ) -> tuple[Batch, dict[str, float]]:
    """``batch`` with the tokens sampled more than ``max_staleness`` versions before
    ``version`` out of its loss mask, and the staleness metrics (``staleness/masked``: the
    share of trainable tokens masked)."""
    metrics = staleness_metrics(batch, version)
    fresh = get("offpolicy", "staleness_mask")(
        versions=batch.versions, mask=batch.loss_mask, current_version=version,
        max_off_policy_steps=max_staleness)
    metrics["staleness/masked"] = float(1 - fresh.sum() / batch.loss_mask.sum().clamp(min=1))
    return batch.replace(loss_mask=fresh), metrics
