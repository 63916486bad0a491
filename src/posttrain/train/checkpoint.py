"""Atomic checkpoints: an HF model directory plus optimiser, RNG and data-cursor state.

A checkpoint is written into a temporary sibling directory, flushed, then renamed into place
(``os.replace`` is atomic on POSIX); ``latest`` names the newest complete one (and the ones
before it, newest last) and is itself replaced atomically. A crash mid-write leaves only a
``.tmp-*`` directory that is ignored. With ``keep_last`` only the newest checkpoints stay.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain.models import save_model
from posttrain.train.trainer import Trainer

STATE_FILE = "trainer_state.pt"
LATEST = "latest"
CRITIC_DIR = "critic"


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    root: str | Path, trainer: Trainer, tokenizer, cursor: dict[str, Any], tag: str,
    critic: Trainer | None = None, write: bool = True, keep_last: int = 0,
) -> Path | None:
    """Write ``root/tag`` atomically and point ``root/latest`` at it; a critic's model goes to
    ``root/tag/critic``; then remove all but the newest ``keep_last`` checkpoints (0: keep
    all). Every rank of a sharded trainer calls it (its weights and optimiser state are
    gathered); only a rank with ``write`` writes."""
    model = trainer.export_model()
    state = {"trainer": trainer.state_dict(), "rng": rng_state(), "cursor": cursor}
    if critic is not None:
        state["critic"] = critic.state_dict()
    if not write:
        return None
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / tag, root / f".tmp-{tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tokenizer, tmp)
    if critic is not None:
        save_model(critic.model, tokenizer, tmp / CRITIC_DIR)
    with open(tmp / STATE_FILE, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    history = [t for t in _pointer(root).get("history", []) if t != tag] + [tag]
    kept = history[-keep_last:] if keep_last else history
    pointer = root / f".tmp-{LATEST}"
    pointer.write_text(json.dumps({"tag": tag, "history": kept}))
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    for old in history[: len(history) - len(kept)]:
        shutil.rmtree(root / old, ignore_errors=True)
    return final


def _pointer(root: Path) -> dict[str, Any]:
    """``latest``'s record: the newest ``tag`` and the ``history`` of kept tags, oldest first
    (a pointer written before histories were kept lists its tag alone); empty without one."""
    pointer = root / LATEST
    if not pointer.is_file():
        return {}
    record = json.loads(pointer.read_text())
    return {"history": [record["tag"]], **record}


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    tag = _pointer(Path(root)).get("tag")
    if tag is None:
        return None
    path = Path(root) / tag
    return path if (path / STATE_FILE).is_file() else None


def load_checkpoint_state(
    path: str | Path, trainer: Trainer, critic: Trainer | None = None
) -> dict[str, Any]:
    """Restore optimiser, scheduler, counters and RNG into ``trainer`` (whose model was loaded
    from ``path``) and ``critic`` (model from ``path/critic``); returns the data cursor."""
    state = torch.load(Path(path) / STATE_FILE, weights_only=False)
    trainer.load_state_dict(state["trainer"])
    if critic is not None:
        critic.load_state_dict(state["critic"])
    set_rng_state(state["rng"])
    return state["cursor"]
