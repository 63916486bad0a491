"""Training runs and their checkpoints as Tinker's REST client lists them (``RestClient``:
``get_training_run[_by_tinker_path]``, ``list_training_runs``, ``list_checkpoints``,
``delete_checkpoint``, ``get_weights_info_by_tinker_path``), read from the checkpoint
directory, so they outlive the server: a run is a training client (``training_run_id`` its
``model_id``), recorded in ``<root>/<model_id>/run.json`` when it is created, with the
client's ``user_metadata`` (where tinker-cookbook keeps a run's renderer name)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timezone
from urllib.parse import unquote

from posttrain.tinker_api.adapters import LoraSpec
from posttrain.tinker_api.checkpoints import (
    KINDS,
    PREFIX,
    CheckpointError,
    Checkpoints,
    tinker_path,
)
from posttrain.types.jsonl import write_atomic

TYPES = {"weights": "training", "sampler_weights": "sampler"}  # folder -> checkpoint_type
OWNER = "local"


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat()


class Runs:
    def __init__(self, checkpoints: Checkpoints, base_model: str) -> None:
        self.checkpoints, self.base_model = checkpoints, base_model

    def record(self, model_id: str, spec: LoraSpec, user_metadata: dict | None) -> None:
        """Write the run's record (atomically)."""
        write_atomic(self.checkpoints.run_folder(model_id) / "run.json", json.dumps({
            "lora": dataclasses.asdict(spec), "base_model": self.base_model,
            "user_metadata": {str(k): str(v) for k, v in (user_metadata or {}).items()}}))

    def checkpoints_of(self, model_id: str) -> list[dict]:
        """The run's checkpoints, oldest first (``Checkpoint``)."""
        found = []
        for kind in KINDS:
            for d in sorted((self.checkpoints.run_folder(model_id) / kind).glob("[!.]*")):
                if (d / "adapter.safetensors").is_file():
                    found.append({
                        "checkpoint_id": f"{kind}/{d.name}", "checkpoint_type": TYPES[kind],
                        "time": _time(d.stat().st_mtime),
                        "tinker_path": tinker_path(model_id, kind, d.name),
                        "size_bytes": sum(f.stat().st_size for f in d.iterdir()),
                        "public": False})
        return sorted(found, key=lambda c: c["time"])

    def run(self, model_id: str) -> dict:
        """The run ``model_id`` (``TrainingRun``); KeyError when there is none."""
        record = self.checkpoints.run_folder(model_id) / "run.json"
        if not record.is_file():
            raise KeyError(f"no training run {model_id!r} on this server")
        saved = json.loads(record.read_text())
        checkpoints = self.checkpoints_of(model_id)
        last = {t: next((c for c in reversed(checkpoints) if c["checkpoint_type"] == t), None)
                for t in TYPES.values()}
        newest = max([_time(record.stat().st_mtime)] + [c["time"] for c in checkpoints])
        return {"training_run_id": model_id, "base_model": saved["base_model"],
                "model_owner": OWNER, "is_lora": True, "corrupted": False,
                "lora_rank": saved["lora"]["rank"], "last_request_time": newest,
                "last_checkpoint": last["training"], "last_sampler_checkpoint": last["sampler"],
                "user_metadata": saved["user_metadata"] or None}

    def runs(self, limit: int, offset: int) -> dict:
        """``TrainingRunsResponse``: the runs, newest first, ``limit`` from ``offset``."""
        records = sorted(self.checkpoints.root.glob("*/run.json"),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        ids = [unquote(p.parent.name) for p in records]
        return {"training_runs": [self.run(i) for i in ids[offset:offset + limit]],
                "cursor": {"offset": offset, "limit": limit, "total_count": len(ids)}}

    def delete(self, model_id: str, checkpoint_id: str) -> None:
        """Remove the checkpoint ``<kind>/<name>`` of the run."""
        path = f"{PREFIX}{model_id}/{checkpoint_id}"
        if not self.checkpoints.exists(path):
            raise CheckpointError(f"no checkpoint at {path}")
        shutil.rmtree(self.checkpoints.directory(path))

    def weights_info(self, path: str) -> dict:
        """``WeightsInfoResponse`` of the checkpoint at ``path``."""
        spec = self.checkpoints.spec(path)
        return {"base_model": self.base_model, "is_lora": True, "lora_rank": spec.rank,
                "train_attn": spec.train_attn, "train_mlp": spec.train_mlp,
                "train_unembed": spec.train_unembed}
