"""Atomic checkpoints: an HF model directory plus optimiser, RNG and data-cursor state.

A checkpoint is written into a temporary sibling directory, flushed, then renamed into place
(``os.replace`` is atomic on POSIX); ``latest`` names the newest complete one (and the ones
before it, newest last) and is itself replaced atomically. A crash mid-write leaves only a
``.tmp-*`` directory that is ignored. With ``keep_last`` only the newest checkpoints stay.

A whole checkpoint holds the model as a ``from_pretrained`` directory and the whole optimiser
state (gathered from every process); a sharded one (``train.shards``) holds each process's
shards of both and the model's ``config.json``; either resumes on any process count.
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
from posttrain.train.parallel import by_writer
from posttrain.train.shards import is_sharded, load_shards, save_shards
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


def save_checkpoint(root: str | Path, trainer: Trainer, tokenizer, cursor: dict[str, Any],
                    tag: str, critic: Trainer | None = None, write: bool = True,
                    keep_last: int = 0, sharded: bool = False) -> Path | None:
    """Write ``root/tag`` atomically and point ``root/latest`` at it; a critic's model goes to
    ``root/tag/critic``; then remove all but the newest ``keep_last`` checkpoints (0: keep
    all). Every process of a trainer's group calls it; only the one with ``write`` writes
    the files besides the shards. Whole (the weights and optimiser state are gathered), or
    ``sharded`` (each process writes its own)."""
    root = Path(root)
    final, tmp = root / tag, root / f".tmp-{tag}"
    # the whole model before the whole optimiser state: asked first, FSDP2's optimiser state
    # dict fails to name its parameters (KeyError; tests/e2e/test_scaling_cli.py)
    model = None if sharded else trainer.export_model()
    state = {"trainer": trainer.state_dict(optimizer=not sharded), "rng": rng_state(),
             "cursor": cursor}
    if critic is not None:
        state["critic"] = critic.state_dict(optimizer=not sharded)
    if sharded:
        by_writer(write, lambda: _fresh(tmp))
        save_shards(tmp, trainer, critic)
        if write:
            trainer.model.config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    elif write:
        _fresh(tmp)
        save_model(model, tokenizer, tmp)
        for addon in trainer.addons:  # beside the model, as a stage's (an engine may use it)
            addon.save(tmp)
        if critic is not None:
            save_model(critic.model, tokenizer, tmp / CRITIC_DIR)
    if not write:
        return None
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


def _fresh(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)


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


def load_checkpoint_state(path: str | Path, trainer: Trainer, critic: Trainer | None = None
                          ) -> dict[str, Any]:
    """Restore optimiser, scheduler, counters and RNG into ``trainer`` (whose model was loaded
    from ``path``, or for a sharded checkpoint is filled from its shards) and ``critic``
    (model from ``path/critic``, or the shards); returns the data cursor. Every process of a
    trainer's group calls it."""
    state = torch.load(Path(path) / STATE_FILE, weights_only=False)
    if is_sharded(Path(path)):
        load_shards(Path(path), trainer, critic)
    trainer.load_state_dict(state["trainer"])
    if critic is not None:
        critic.load_state_dict(state["critic"])
    set_rng_state(state["rng"])
    return state["cursor"]
