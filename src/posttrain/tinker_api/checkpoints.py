"""Checkpoints under ``tinker://<model_id>/<kind>/<name>`` (kind ``weights``: the adapter and
its optimizer, for ``load_state``; ``sampler_weights``: the adapter alone, for sampling), kept
in a directory: ``<root>/<model_id>/<kind>/<name>/`` with ``adapter.safetensors``,
``lora.json`` and, for ``weights``, ``optimizer.pt``; each written to a temporary directory
and renamed into place."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote

import torch
from safetensors.torch import load_file, save_file

from posttrain.tinker_api.adapters import LoraSpec

PREFIX = "tinker://"
KINDS = ("weights", "sampler_weights")


class CheckpointError(ValueError):
    """A path that is not a checkpoint of this server."""


def tinker_path(model_id: str, kind: str, name: str) -> str:
    return f"{PREFIX}{model_id}/{kind}/{name}"


class Checkpoints:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def directory(self, path: str) -> Path:
        parts = path.removeprefix(PREFIX).split("/") if path.startswith(PREFIX) else []
        if len(parts) != 3 or parts[1] not in KINDS \
                or any(part in ("", ".", "..") for part in (parts[0], parts[2])):
            raise CheckpointError(f"{path!r} is not tinker://<model_id>/<weights|"
                                  "sampler_weights>/<name>")
        return self.run_folder(parts[0]) / parts[1] / parts[2]

    def run_folder(self, model_id: str) -> Path:
        """Where a training client's checkpoints (and its run record) are kept."""
        return self.root / quote(model_id, safe="")

    def save(self, path: str, spec: LoraSpec, adapter: dict[str, torch.Tensor],
             optimizer: dict | None = None, overwrite: bool = True) -> str:
        final = self.directory(path)
        if final.exists() and not overwrite:
            raise CheckpointError(f"{path} exists (overwrite=false)")
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        old = final.with_name(f".old-{tmp.name}")
        try:
            save_file({k: v.contiguous() for k, v in adapter.items()},
                      tmp / "adapter.safetensors")
            (tmp / "lora.json").write_text(json.dumps(dataclasses.asdict(spec)))
            if optimizer is not None:
                torch.save(optimizer, tmp / "optimizer.pt")
            if final.exists():  # the old one moves aside first: a name never holds a partial one
                final.rename(old)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
        return path

    def exists(self, path: str) -> bool:
        return (self.directory(path) / "adapter.safetensors").is_file()

    def spec(self, path: str) -> LoraSpec:
        """The adapter's configuration in the checkpoint at ``path``."""
        if not self.exists(path):
            raise CheckpointError(f"no checkpoint at {path}")
        return LoraSpec(**json.loads((self.directory(path) / "lora.json").read_text()))

    def load(self, path: str) -> tuple[LoraSpec, dict[str, torch.Tensor], dict | None]:
        spec, d = self.spec(path), self.directory(path)
        optimizer = d / "optimizer.pt"
        return (spec, load_file(d / "adapter.safetensors"),
                torch.load(optimizer, weights_only=True) if optimizer.is_file() else None)
